/* args.c - the one reader of `stoke` command lines (args.h): options found by their
 * tables, values checked by their types, and the messages of a bad command line, so
 * that every command says them alike. */
#include "cli/args.h"

#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "stoke/train.h"

/* The entry for `--name` (len bytes of it), and its group; the wildcard setting "*"
 * answers only for a name the configuration table knows. */
static const cli_opt *find(const cli_spec *s, const char *name, size_t len, int *group)
{
    for (int g = 0; g < s->ngroups; g++)
        for (const cli_opt *o = s->groups[g].opts; o->name; o++)
            if (strlen(o->name) == len && !strncmp(o->name, name, len)) {
                *group = g;
                return o;
            }
    char key[64];
    if (len >= sizeof key)
        return NULL;
    memcpy(key, name, len);
    key[len] = '\0';
    for (int g = 0; g < s->ngroups; g++)
        for (const cli_opt *o = s->groups[g].opts; o->name; o++)
            if (o->type == CLI_SETTING && !strcmp(o->name, "*") &&
                stoke_train_config_find(key, NULL) >= 0) {
                *group = g;
                return o;
            }
    return NULL;
}

/* " a b c " as "a, b or c". */
static void say_choices(const char *choices, char *buf, size_t n)
{
    size_t k = 0, words = 0;
    for (const char *p = choices; *p; p++)
        words += *p != ' ' && (p == choices || p[-1] == ' ');
    buf[0] = '\0';
    size_t w = 0;
    for (const char *p = choices; *p && k < n;) {
        p += strspn(p, " ");
        size_t len = strcspn(p, " ");
        if (!len)
            break;
        w++;
        const char *sep = w == 1 ? "" : w == words ? " or " : ", ";
        k += (size_t)snprintf(buf + k, n - k, "%s%.*s", sep, (int)len, p);
        p += len;
    }
}

/* The index of `word` in " a b c ", or -1. */
static int choice_of(const char *choices, const char *word)
{
    size_t len = strlen(word);
    int i = 0;
    for (const char *p = choices; *p;) {
        p += strspn(p, " ");
        size_t n = strcspn(p, " ");
        if (!n)
            break;
        if (n == len && !strncmp(p, word, n))
            return i;
        p += n;
        i++;
    }
    return -1;
}

static int bad_value(const cli_spec *s, const cli_opt *o, const char *v)
{
    if (o->type == CLI_CHOICE) {
        char list[256];
        say_choices(o->choices, list, sizeof list);
        return cli_usage_error(s->cmd, "--%s takes %s, not '%s'", o->name, list, v);
    }
    if (o->want)
        return cli_usage_error(s->cmd, "--%s %s, not '%s'", o->name, o->want, v);
    return cli_usage_error(s->cmd, "--%s: '%s' is not a %s in [%.15g, %.15g]", o->name, v,
                           o->type == CLI_LONG ? "whole number" : "number", o->min, o->max);
}

/* Stores value v of option o into dest. -1, or the exit code of a bad value. */
static int store(const cli_spec *s, const cli_opt *o, void *dest, const char *v)
{
    void *field = (char *)dest + o->off;
    switch (o->type) {
    case CLI_SWITCH: *(bool *)field = true; return -1;
    case CLI_TEXT:
        if (o->min > 0 && !*v)
            return bad_value(s, o, v);
        *(const char **)field = v;
        return -1;
    case CLI_LONG: {
        long x;
        if (!cli_parse_long(v, (long)o->min, (long)o->max, &x))
            return bad_value(s, o, v);
        *(long *)field = x;
        return -1;
    }
    case CLI_DOUBLE:
        return cli_parse_double(v, o->min, o->max, (double *)field) ? -1 : bad_value(s, o, v);
    case CLI_CHOICE: {
        int i = choice_of(o->choices, v);
        if (i < 0)
            return bad_value(s, o, v);
        *(int *)field = o->values ? o->values[i] : i;
        return -1;
    }
    case CLI_CUSTOM: return o->parse(v, dest) ? -1 : bad_value(s, o, v);
    default: return -1;
    }
}

int cli_parse(cli_spec *s, int argc, char **argv, int first)
{
    s->npos = s->ngiven = 0;
    /* --help wins wherever it stands, but not among a command's own arguments */
    for (int i = first; i < argc && strcmp(argv[i], "--"); i++)
        if (cli_is_help(argv[i])) {
            s->usage();
            return 0;
        }
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        bool option = a[0] == '-' && (a[1] || !s->dash_is_arg);
        if (!option) {
            if (s->npos >= s->max_pos)
                return cli_usage_error(s->cmd, "%s%sunexpected argument '%s'", s->sub ? s->sub : "",
                                       s->sub ? ": " : "", a);
            s->pos[s->npos++] = a;
            continue;
        }
        const char *name = a[1] == '-' ? a + 2 : NULL;
        const char *eq = name && s->equals ? strchr(name, '=') : NULL;
        char key[64] = "";
        size_t len = name ? (eq ? (size_t)(eq - name) : strlen(name)) : 0;
        int g = 0;
        const cli_opt *o = name && len < sizeof key ? find(s, name, len, &g) : NULL;
        if (!o || (eq && !o->arg && o->type != CLI_SETTING))
            return cli_usage_error(s->cmd, "unknown option '%s'%s%s", a, s->sub ? " for " : "",
                                   s->sub ? s->sub : "");
        void *dest = s->groups[g].dest;
        if (o->type == CLI_REST) {
            if (i + 1 >= argc)
                return cli_usage_error(s->cmd, "'--' must be followed by %s", o->want);
            *(char ***)(void *)((char *)dest + o->off) = argv + i + 1;
            return -1;
        }
        memcpy(key, name, len);
        key[len] = '\0';
        const char *v = eq ? eq + 1 : NULL;
        bool truth = false;
        if (o->type == CLI_SETTING && !strcmp(o->name, "*"))
            stoke_train_config_find(key, &truth);
        if (!v && o->type == CLI_SETTING && (o->value || truth)) {
            /* a switch: the flag alone says it; some take a word after it as well */
            const char *next = i + 1 < argc ? argv[i + 1] : "";
            v = o->choices && *next && choice_of(o->choices, next) >= 0 ? argv[++i]
                : o->value                                              ? o->value
                                                                        : "true";
        } else if (!v && (o->arg || o->type == CLI_CONFIG || o->type == CLI_SETTING)) {
            if (i + 1 >= argc)
                return cli_usage_error(s->cmd, "--%s needs a value", key);
            v = argv[++i];
        }
        if (o->type == CLI_SETTING || o->type == CLI_CONFIG) {
            if (s->ngiven >= s->max_given)
                return cli_usage_error(s->cmd, "too many options (at most %d)", s->max_given);
            cli_given *gv = &s->given[s->ngiven++];
            *gv = (cli_given){.opt = o, .value = v, .dest = (char *)dest + o->off};
            snprintf(gv->key, sizeof gv->key, "%s", o->key ? o->key : key);
            continue;
        }
        int rc = store(s, o, dest, v);
        if (rc >= 0)
            return rc;
    }
    return -1;
}

/* A setting's error, which begins with its key ("batch_size: '0' is not ..."), as the
 * flag that gave it: "--batch-size: '0' is not ...". */
static int setting_error(const cli_spec *s)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", stoke_last_error());
    for (char *p = msg; *p && *p != ':'; p++)
        if (*p == '_')
            *p = '-';
    return cli_usage_error(s->cmd, "--%s", msg);
}

int cli_apply_settings(const cli_spec *s, struct stoke_train_config *env, const char **config_path)
{
    *config_path = NULL;
    for (int i = 0; i < s->ngiven; i++)
        if (s->given[i].opt->type == CLI_CONFIG) {
            if (stoke_train_config_load_file(s->given[i].dest, s->given[i].value) != STOKE_OK)
                return cli_last_error(s->cmd);
            *config_path = s->given[i].value;
        }
    if (env && stoke_train_config_load_env(env, NULL) != STOKE_OK)
        return cli_last_error(s->cmd);
    for (int i = 0; i < s->ngiven; i++) {
        const cli_given *g = &s->given[i];
        if (g->opt->type == CLI_SETTING &&
            stoke_train_config_set(g->dest, g->key, g->value, STOKE_CFG_FLAG) != STOKE_OK)
            return setting_error(s);
    }
    return -1;
}

void cli_print_options(const cli_opt *opts, int width)
{
    for (const cli_opt *o = opts; o->name; o++) {
        if (!strcmp(o->name, "*"))
            continue;
        int n = printf("  --%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        const char *h = o->help;
        size_t len = strcspn(h, "\n");
        printf("%*s%.*s\n", n < width ? width - n : 2, "", (int)len, h);
        for (h += len; *h == '\n'; h += len) {
            h++;
            len = strcspn(h, "\n");
            printf("%*s%.*s\n", width, "", (int)len, h);
        }
    }
}

/* Prints `item` after a space, or on a new line `indent` columns in when it would pass
 * column 80; returns the column after it. */
static int put_item(const char *item, int col, int indent)
{
    int n = (int)strlen(item);
    if (col + 1 + n > 80)
        return printf("\n%*s%s", indent, "", item) - 1;
    return col + printf(" %s", item);
}

void cli_print_names(const cli_opt *opts, int col, const char *end)
{
    for (const cli_opt *o = opts; o->name; o++) {
        char item[96];
        snprintf(item, sizeof item, "--%s%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "",
                 o[1].name ? "," : end);
        col = put_item(item, col, 0);
    }
    printf("\n");
}

void cli_print_usage(const char *lead, int indent, const cli_opt *const *tables, const char *tail)
{
    int col = printf("%s", lead);
    for (; *tables; tables++)
        for (const cli_opt *o = *tables; o->name; o++) {
            char item[96];
            snprintf(item, sizeof item, "[--%s%s%s]", o->name, o->arg ? " " : "",
                     o->arg ? o->arg : "");
            if (strcmp(o->name, "*"))
                col = put_item(item, col, indent);
        }
    if (tail)
        put_item(tail, col, indent);
    printf("\n");
}
