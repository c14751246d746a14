/* common/progress.c — the single stderr progress display. */
#include "common/progress.h"

#include "common/clock.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    bool active, tty, shown;
    char label[128], unit[16], extra[256];
    double total, done;
    double t0, last; /* start and last output, seconds (monotonic) */
    double interval; /* seconds between outputs */
} P;

/* "1.2 GB" for bytes, "5.6M tok" otherwise; x is a count or a rate. */
static void fmt_amount(char *out, size_t cap, double x, const char *unit, const char *suffix) {
    static const char *pre[] = {"", "k", "M", "G", "T"};
    bool bytes = !strcmp(unit, "B");
    int i = 0;
    while (fabs(x) >= 1000 && i < 4) {
        x /= 1000;
        i++;
    }
    const char *prefix = bytes && i == 1 ? "K" : pre[i];
    if (bytes) snprintf(out, cap, "%.*f %sB%s", i ? 1 : 0, x, prefix, suffix);
    else snprintf(out, cap, "%.*f%s %s%s", i || x != floor(x) ? 1 : 0, x, prefix, unit, suffix);
}

static void fmt_duration(char *out, size_t cap, double s) {
    long t = s > 0 && s < 1e9 ? (long)(s + 0.5) : 0;
    snprintf(out, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
}

/* The status text after the label: percentage, amount, rate, ETA, extra. */
static void fmt_status(char *out, size_t cap, double elapsed) {
    char amount[48], rate[48], eta[64] = "";
    double r = elapsed > 0 ? P.done / elapsed : 0;
    fmt_amount(amount, sizeof amount, P.done, P.unit, "");
    fmt_amount(rate, sizeof rate, r, P.unit, "/s");
    size_t n = 0;
    if (P.total > 0) {
        n += (size_t)snprintf(out, cap, "%3.0f%%  ", fmin(100.0, 100.0 * P.done / P.total));
        if (r > 0 && P.done < P.total) {
            char d[48];
            fmt_duration(d, sizeof d, (P.total - P.done) / r);
            snprintf(eta, sizeof eta, "  ETA %s", d);
        }
    }
    snprintf(out + n, cap - n, "%s  %s%s%s%s", amount, rate, eta, P.extra[0] ? "  " : "", P.extra);
}

void progress_begin(const char *label, double total, const char *unit) {
    pthread_mutex_lock(&mu);
    P.active = true;
    P.tty = isatty(2);
    P.shown = false;
    snprintf(P.label, sizeof P.label, "%s", label);
    snprintf(P.unit, sizeof P.unit, "%s", unit ? unit : "");
    P.extra[0] = 0;
    P.total = total;
    P.done = 0;
    P.t0 = P.last = clock_now_s();
    const char *iv = getenv("KF_PROGRESS_INTERVAL");
    P.interval = P.tty ? 0.1 : 10.0;
    if (!P.tty && iv && *iv) {
        char *end;
        double v = strtod(iv, &end);
        if (!*end && v >= 0) P.interval = v;
    }
    pthread_mutex_unlock(&mu);
}

void progress_update(double done, const char *extra) {
    char line[1024];
    bool plain = false;
    pthread_mutex_lock(&mu);
    if (!P.active) {
        pthread_mutex_unlock(&mu);
        return;
    }
    P.done = done;
    if (extra) snprintf(P.extra, sizeof P.extra, "%s", extra);
    double t = clock_now_s();
    if (t - P.last >= P.interval) {
        P.last = t;
        char status[400];
        fmt_status(status, sizeof status, t - P.t0);
        if (P.tty) {
            struct winsize ws;
            int width = ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20 ? ws.ws_col : 100;
            char bar[32] = "";
            if (P.total > 0) { /* " [=====>    ]" */
                enum { W = 24 };
                int fill = (int)(W * fmin(1.0, done / P.total));
                bar[0] = ' ';
                bar[1] = '[';
                for (int i = 0; i < W; i++) bar[2 + i] = i < fill ? '=' : i == fill ? '>' : ' ';
                bar[2 + W] = ']';
                bar[3 + W] = 0;
            }
            int n = snprintf(line, sizeof line, "%s%s %s", P.label, bar, status);
            if (n >= width) line[width - 1] = 0; /* never wrap: \r must reach the line start */
            fprintf(stderr, "\r%s\x1b[K", line);
            fflush(stderr);
            P.shown = true;
        } else {
            snprintf(line, sizeof line, "%s: %s", P.label, status);
            plain = true;
        }
    }
    pthread_mutex_unlock(&mu);
    if (plain) kf_log_info("%s", line); /* outside mu: the logger takes it to clear the bar */
}

void progress_clear_line(void) {
    pthread_mutex_lock(&mu);
    if (P.shown) {
        fputs("\r\x1b[K", stderr);
        P.shown = false;
    }
    pthread_mutex_unlock(&mu);
}

void progress_end(void) {
    char line[1024], amount[48], rate[48];
    pthread_mutex_lock(&mu);
    if (!P.active) {
        pthread_mutex_unlock(&mu);
        return;
    }
    double el = clock_now_s() - P.t0;
    fmt_amount(amount, sizeof amount, P.done, P.unit, "");
    fmt_amount(rate, sizeof rate, el > 0 ? P.done / el : 0, P.unit, "/s");
    snprintf(line, sizeof line, "%s: %s in %.1f s, %s%s%s", P.label, amount, el, rate,
             P.extra[0] ? ", " : "", P.extra);
    P.active = false;
    pthread_mutex_unlock(&mu);
    kf_log_info("%s", line);
}
