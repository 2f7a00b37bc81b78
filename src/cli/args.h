/* args.h - the one reader of `stoke` command lines. Every command declares its options
 * once, in a table (name, value, type, limits, help), and both the parsing and the
 * option lines of its --help come from that table; `stoke train`'s settings are the
 * configuration table's keys (train/config.c), reached through one wildcard entry. */
#ifndef STOKE_CLI_ARGS_H
#define STOKE_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>

typedef enum cli_opt_type {
    CLI_SWITCH,  /* no value: sets a bool to true */
    CLI_TEXT,    /* the value as given (const char *); min > 0: it may not be empty */
    CLI_LONG,    /* a whole number in [min, max] (long) */
    CLI_DOUBLE,  /* a number in [min, max] (double) */
    CLI_CHOICE,  /* one word of `choices`: values[its index], or the index (int) */
    CLI_CUSTOM,  /* parse(value, dest): false is a bad value */
    CLI_SETTING, /* a stoke train setting (a stoke_train_config at off): `key`, or the
                  * flag's own name; "*" stands for every key (the flag names it) */
    CLI_CONFIG,  /* a YAML file of settings, read before the environment and the flags */
    CLI_REST,    /* "--" (name ""): the arguments after it (char **), `want` says what
                  * they are ("a command") */
} cli_opt_type;

typedef struct cli_opt {
    const char *name; /* the flag without its "--"; NULL ends a table */
    cli_opt_type type;
    size_t off;          /* the field, in the struct the table's group points at */
    const char *arg;     /* the value's name in --help (S, FILE); NULL: takes none */
    const char *help;    /* --help's description; '\n' begins a further line */
    double min, max;     /* CLI_LONG, CLI_DOUBLE; CLI_TEXT: min 1 refuses "" */
    const char *want;    /* a bad value: "--NAME WANT, not 'VALUE'"; NULL: the config
                          * table's wording ("--NAME: 'VALUE' is not a whole number in
                          * [MIN, MAX]"); CLI_CHOICE says its choices */
    const char *choices; /* CLI_CHOICE: " a b c "; CLI_SETTING: the words the flag may
                          * take as its value, when `value` is what it means alone */
    const int *values;   /* CLI_CHOICE: what each choice stores; NULL: its index */
    const char *key;     /* CLI_SETTING: the setting, when not the flag's name */
    const char *value;   /* CLI_SETTING: what the flag alone sets (NULL: it takes one) */
    bool (*parse)(const char *value, void *dest); /* CLI_CUSTOM; dest: the group's */
} cli_opt;

/* One command's table, and the struct its offsets are into. */
typedef struct cli_group {
    const cli_opt *opts;
    void *dest;
} cli_group;

/* A setting or a settings file given on the command line, applied by
 * cli_apply_settings after the parse (a file before the environment, the flags after
 * it, whatever their order on the line). */
typedef struct cli_given {
    const cli_opt *opt;
    char key[64]; /* the setting's key (the flag's name for "*") */
    const char *value;
    void *dest; /* the stoke_train_config */
} cli_given;

typedef struct cli_spec {
    const char *cmd;         /* messages begin "stoke CMD: " */
    const char *sub;         /* data's subcommand: "unknown option '--x' for SUB" */
    void (*usage)(void);     /* -h / --help, anywhere before a "--" */
    const cli_group *groups; /* searched in order */
    int ngroups;
    bool equals;       /* --name=value too, besides --name value */
    bool dash_is_arg;  /* "-" alone is a positional argument */
    const char **pos;  /* positional arguments, at most max_pos */
    int max_pos, npos; /* npos: how many the parse found */
    cli_given *given;  /* CLI_SETTING and CLI_CONFIG occurrences, in order */
    int max_given, ngiven;
} cli_spec;

/* Parses argv[first..argc-1] into the groups' structs. Returns -1 when all is well,
 * else the exit code: 0 after printing the usage (--help), 2 after a usage error
 * ("stoke CMD: unknown option '--x'", "--x needs a value", "--x WANT, not 'v'"). */
int cli_parse(cli_spec *s, int argc, char **argv, int first);

struct stoke_train_config;
/* Applies s->given's settings files, then the environment to *env (NULL: not read),
 * then its settings, to the stoke_train_config each points at (defaulted by the
 * caller). *config_path: the last file read, or NULL. -1, else the exit code after the
 * message, which names the flag and its value as `stoke train` always has
 * ("--batch-size: '0' is not ..."). */
int cli_apply_settings(const cli_spec *s, struct stoke_train_config *env, const char **config_path);

/* The option lines of --help: "  --name ARG" padded to `width` columns (two spaces
 * when longer), then the description, its further lines indented to `width`. */
void cli_print_options(const cli_opt *opts, int width);

/* "--a A, --b B, ..." of a table for a line of --help, wrapped within 80 columns after
 * `lead` (already printed, `col` columns long), ending with `end`. */
void cli_print_names(const cli_opt *opts, int col, const char *end);

/* The usage line: `lead` ("usage: stoke eval CHECKPOINT"), "[--name ARG]" for each
 * option of the NULL-ended `tables`, then `tail` (NULL: none), wrapped within 80
 * columns onto lines `indent` columns in. */
void cli_print_usage(const char *lead, int indent, const cli_opt *const *tables, const char *tail);

#endif
