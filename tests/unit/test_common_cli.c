/* tests/unit/test_common_cli.c — the command-line layer: checked values,
 * bounds, lists, positionals and overrides, --help, and errors that name the
 * option (captured: they are the expected output here). */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "common/error.h"
#include "tests/test.h"

static int64_t steps;
static double tau, temp;
static bool resume;
static const char *name, *pos[2], *stages[2], *over[8];
static double taus[3];
static int64_t batches[2];
static int n_pos, n_stages, n_taus, n_batches, n_over;

static const cli_opt opts[] = {
    {"--steps", CLI_INT, .out = &steps, .lo = 1, .hi = INFINITY},
    {"--tau", CLI_FLOAT, .out = &tau, .lo = 0, .hi = 1},
    {"--temp", CLI_FLOAT, .out = &temp, .lo = 0, .hi = INFINITY, .above = true},
    {"--resume", CLI_FLAG, .out = &resume},
    {"--name", CLI_STR, .out = &name, .alias = "-n"},
    {"--stage", CLI_STR_LIST, .out = stages, .n = &n_stages, .cap = 2},
    {"--taus", CLI_FLOAT_LIST, .out = taus, .n = &n_taus, .cap = 3, .lo = 0, .hi = INFINITY},
    {"--batch", CLI_INT_LIST, .out = batches, .n = &n_batches, .cap = 2, .lo = 1, .hi = INFINITY},
    CLI_OPT_END,
};

/* Parses the space-separated args; returns cli_parse's result, the exit
 * code in *code and what it printed on stderr in *said (malloc'd). */
static int parse(const char *args, int *code, char **said) {
    static char buf[512];
    snprintf(buf, sizeof buf, "%s", args);
    char *argv[32] = {"cmd"};
    int argc = 1;
    for (char *t = strtok(buf, " "); t && argc < 31; t = strtok(NULL, " ")) argv[argc++] = t;
    steps = 10, tau = 0.5, resume = false, name = NULL;
    n_pos = n_stages = n_taus = n_batches = n_over = 0;
    const cli_spec spec = {"kf test",
                           "usage: kf test\n",
                           opts,
                           .pos = pos,
                           .max_pos = 2,
                           .n_pos = &n_pos,
                           .over = (char **)over,
                           .n_over = &n_over};
    *code = -7;
    t_stderr_begin();
    int rc = cli_parse(&spec, argc, argv, code);
    *said = t_stderr_end();
    return rc;
}

int main(void) {
    int code;
    char *said;
    T_EQ_INT(parse("a --steps 3 --tau 0.25 --resume -n x b k.v=1", &code, &said), 0, "valid: %s",
             said);
    T_EQ_INT(steps, 3, "--steps");
    T_NEAR(tau, 0.25, 0, "--tau");
    T_CHECK(resume, "--resume");
    T_EQ_STR(name, "x", "-n is --name");
    T_EQ_INT(n_pos, 2, "positionals");
    T_EQ_STR(pos[0], "a", "first positional");
    T_EQ_STR(pos[1], "b", "second positional");
    T_EQ_INT(n_over, 1, "overrides");
    T_EQ_STR(over[0], "k.v=1", "override");
    free(said);

    T_EQ_INT(parse("--stage s1 --stage s2 --taus 0.5,1,2 --batch 4,16", &code, &said), 0,
             "lists: %s", said);
    T_EQ_INT(n_batches, 2, "--batch count");
    T_EQ_INT(batches[1], 16, "second --batch value");
    T_EQ_INT(n_stages, 2, "--stage count");
    T_EQ_STR(stages[1], "s2", "second --stage");
    T_EQ_INT(n_taus, 3, "--taus count");
    T_NEAR(taus[2], 2, 0, "third --taus value");
    free(said);

    /* every error exits 2 and names the option and the value */
    static const struct {
        const char *args, *says;
    } bad[] = {
        {"--steps 0", "kf test: --steps: expected an integer >= 1, got '0'"},
        {"--steps 3x", "kf test: --steps: expected an integer >= 1, got '3x'"},
        {"--steps 99999999999999999999", "--steps: expected an integer >= 1"},
        {"--tau 1.5", "kf test: --tau: expected a number in [0, 1], got '1.5'"},
        {"--tau nan", "--tau: expected a number in [0, 1], got 'nan'"},
        {"--temp 0", "kf test: --temp: expected a number > 0, got '0'"},
        {"--stage a --stage b --stage c", "kf test: --stage: at most 2 values"},
        {"--taus 1,,2", "--taus: expected a comma-separated list of numbers each >= 0, at most 3"},
        {"--taus 1,2,3,4", "--taus: expected a comma-separated list"},
        {"--taus 1,-2", "--taus: expected a comma-separated list"},
        {"--batch 4,0",
         "--batch: expected a comma-separated list of integers each >= 1, at most 2"},
        {"--batch 4,1.5", "--batch: expected a comma-separated list of integers"},
        {"--bogus", "kf test: unknown option '--bogus'"},
        {"--steps", "kf test: --steps needs a value"},
        {"--name --steps 3", "kf test: --name needs a value (got the option --steps)"},
        {"a b c", "kf test: unexpected argument 'c'"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        T_EQ_INT(parse(bad[k].args, &code, &said), -1, "'%s' refused", bad[k].args);
        T_EQ_INT(code, KF_EXIT_USAGE, "'%s' exit code", bad[k].args);
        T_CHECK(strstr(said, bad[k].says), "'%s': said '%s', want '%s'", bad[k].args, said,
                bad[k].says);
        free(said);
    }

    T_EQ_INT(parse("--steps 3 --help", &code, &said), -1, "--help stops");
    T_EQ_INT(code, KF_EXIT_OK, "--help exit code");
    free(said);

    int64_t v;
    double d;
    const cli_opt any = {.name = "--any", .kind = CLI_INT};
    const cli_opt positive = {
        .name = "--p", .kind = CLI_FLOAT, .lo = 0, .hi = INFINITY, .above = true};
    T_EQ_INT(cli_parse_int(&any, "-5", &v), 0, "unbounded integer");
    T_EQ_INT(v, -5, "unbounded integer value");
    T_EQ_INT(cli_parse_int(&any, "", &v), -1, "empty is not an integer");
    T_EQ_INT(cli_parse_float(&any, "1e-3", &d), 0, "unbounded float");
    T_EQ_INT(cli_parse_float(&any, "inf", &d), -1, "inf is not a finite number");
    T_EQ_INT(cli_parse_float(&positive, "0", &d), -1, "0 is not > 0");
    T_EQ_INT(cli_parse_float(&positive, "1e-9", &d), 0, "1e-9 is > 0");
    return T_DONE();
}
