/* tests/unit/test_trainer_signals.c — the trainer's signal dispositions
 * (train_install_signals): SIGUSR1, SIGTERM and SIGINT are caught (they ask
 * for a preemption checkpoint); SIGPIPE is ignored, so a write to a
 * connection whose reader is gone fails with EPIPE and the process lives on
 * to say why it ends (a rank whose peer's node died was killed by SIGPIPE
 * inside Open MPI's TCP transport, without a word). */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "tests/test.h"
#include "trainer/train/train.h"

int main(void) {
    train_install_signals();
    const int caught[] = {SIGUSR1, SIGTERM, SIGINT};
    for (int i = 0; i < 3; i++) {
        struct sigaction sa;
        sigaction(caught[i], NULL, &sa);
        T_CHECK(sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN, "%s: not caught",
                strsignal(caught[i]));
    }
    struct sigaction sa;
    sigaction(SIGPIPE, NULL, &sa);
    T_CHECK(sa.sa_handler == SIG_IGN, "SIGPIPE is not ignored");
    /* a pipe without a reader, as a socket whose peer is gone: EPIPE, alive */
    int fd[2];
    T_REQUIRE(pipe(fd) == 0, "pipe");
    close(fd[0]);
    errno = 0;
    ssize_t w = write(fd[1], "x", 1);
    int e = errno;
    T_EQ_INT(w, -1, "write to a pipe without a reader");
    T_EQ_INT(e, EPIPE, "its errno (%s)", strerror(e));
    close(fd[1]);
    return T_DONE();
}
