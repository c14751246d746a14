/* common/cli.h — the command-line layer every kf command parses its options with.
 *
 * A command describes its options in a table and calls cli_parse once:
 *
 *   int64_t steps = 10;
 *   const char *stages[32];
 *   int n_stages = 0;
 *   const cli_opt opts[] = {
 *       {"--steps", CLI_INT, .out = &steps, .lo = 1, .hi = INFINITY},
 *       {"--stage", CLI_STR_LIST, .out = stages, .n = &n_stages, .cap = 32},
 *       CLI_OPT_END,
 *   };
 *   cli_spec spec = {"kf bench train", USAGE, opts, .pos = &config, .max_pos = 1,
 *                    .over = over, .n_over = &n_over};
 *   int code;
 *   if (cli_parse(&spec, argc, argv, &code)) return code;
 *
 * Every value is checked (integers and floats parse completely, within the
 * option's bounds; lists stay within their capacity), and every error names
 * the command and the option: "kf bench train: --steps: expected an integer
 * >= 1, got 'x'". `--help` / `-h` print the command's usage text on stdout.
 * An option takes its value from the next argument (`--steps 10`).
 */
#ifndef KF_COMMON_CLI_H
#define KF_COMMON_CLI_H

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    CLI_FLAG,      /* no value: *(bool *)out = true */
    CLI_STR,       /* *(const char **)out = the value */
    CLI_INT,       /* *(int64_t *)out, within [lo, hi] */
    CLI_FLOAT,     /* *(double *)out, finite, within [lo, hi] */
    CLI_STR_LIST,  /* repeated option: ((const char **)out)[(*n)++], at most cap */
    CLI_INT_LIST,  /* one comma-separated value: ((int64_t *)out)[0..*n), at most cap, each within
                      [lo, hi] */
    CLI_FLOAT_LIST /* the same for numbers: ((double *)out)[0..*n) */
} cli_kind;

typedef struct cli_opt {
    const char *name; /* "--steps"; NULL ends the table */
    cli_kind kind;
    void *out;
    double lo, hi;     /* numeric bounds, inclusive; lo == hi == 0: no bounds (see cli_parse) */
    bool above;        /* lo itself excluded: values > lo (e.g. a temperature > 0) */
    int *n;            /* lists: number of values stored */
    int cap;           /* lists: room in out */
    const char *alias; /* another spelling, e.g. "-o" (NULL: none) */
} cli_opt;

/* The entry that ends an option table (designated, so that no compiler
 * warns about the fields it leaves zero). */
#define CLI_OPT_END                                                                                \
    { .name = NULL }

typedef struct cli_spec {
    const char *cmd;     /* "kf bench train", the prefix of every error */
    const char *usage;   /* the --help text, printed as is */
    const cli_opt *opts; /* terminated by an entry with name NULL */
    const char **pos;    /* positional arguments (those not starting with '-') */
    int max_pos;         /* room in pos; one more is an error */
    int *n_pos;          /* number stored (NULL when max_pos is 1 and the caller tests pos[0]) */
    char **over;         /* key.path=value overrides, NULL when the command takes none: an
                            argument with '=' then counts as positional */
    int *n_over;         /* number stored; over must have room for argc entries */
} cli_spec;

/** Parses argv[1..argc). Integer bounds: an option whose lo and hi are both 0
 * takes any int64 (CLI_INT) or any finite number (CLI_FLOAT); set hi to
 * INFINITY for a lower bound only. @return 0 to go on with the parsed
 * values, or -1 when the command should exit with *exit_code: 0 after
 * --help (usage printed on stdout), KF_EXIT_USAGE after an error (printed on
 * stderr, naming the option). */
int cli_parse(const cli_spec *spec, int argc, char **argv, int *exit_code);

/** Parses all of text as an int64 within o's bounds; -1 when it is not one. */
int cli_parse_int(const cli_opt *o, const char *text, int64_t *out);

/** Parses all of text as a finite double within o's bounds; -1 when it is not one. */
int cli_parse_float(const cli_opt *o, const char *text, double *out);

#endif
