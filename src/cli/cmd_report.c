/* cmd_report.c - `stoke report RUN.jsonl [MONITOR.jsonl] [BENCH.json] [TUNE.json]
 * [-o run.html]`: the page of docs/report.md. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "stoke/report.h"

#define REPORT_DEFAULT_OUT "stoke-report.html"

typedef struct report_args {
    const char *output;
} report_args;

static const cli_opt report_opts[] = {
    {.name = "output",
     .type = CLI_TEXT,
     .off = offsetof(report_args, output),
     .arg = "FILE",
     .min = 1,
     .help = "the page (-o FILE too; default " REPORT_DEFAULT_OUT ")"},
    {0}};

void cmd_report_usage(void)
{
    printf("usage: stoke report RUN.jsonl [MONITOR.jsonl] [BENCH.json] [TUNE.json] "
           "[-o FILE]\n\n"
           "Draws one self-contained HTML page (inline SVG, no script, no network) from a\n"
           "run's files, given in any order and recognised by their content: the training\n"
           "log (`stoke train --log`), the monitor's JSON lines (`stoke monitor --jsonl`),\n"
           "`stoke bench --json` and `stoke tune --json`, at most one of each. At the top the\n"
           "diagnosis and recommendations in words; then training, utilization, the loader,\n"
           "tuning and bench. Large logs are downsampled (at most 2,000 points a series,\n"
           "the lowest and highest of each stretch kept). `stoke train --report F` and\n"
           "`stoke monitor --report F` write it at the end of a run. docs/report.md.\n\n");
    cli_print_options(report_opts, 18);
    printf("\nExit: 0 written, 1 an input unreadable or of no known kind (the file and line\n"
           "named; nothing written), 2 usage.\n");
}

int cmd_report(int argc, char **argv)
{
    report_args a = {.output = REPORT_DEFAULT_OUT};
    const char *in[5] = {0};
    /* "-o FILE" beside "--output FILE": the parser knows long options only */
    char **av = calloc((size_t)argc + 1, sizeof *av);
    if (!av)
        return cli_error("report", "out of memory");
    for (int i = 0; i < argc; i++)
        av[i] = !strcmp(argv[i], "-o") ? (char *)"--output" : argv[i];
    cli_group g = {report_opts, &a};
    cli_spec spec = {.cmd = "report",
                     .usage = cmd_report_usage,
                     .groups = &g,
                     .ngroups = 1,
                     .equals = true,
                     .dash_is_arg = false,
                     .pos = in,
                     .max_pos = 4};
    int rc = cli_parse(&spec, argc, av, 1);
    free(av);
    if (rc >= 0)
        return rc;
    if (spec.npos == 0)
        return cli_usage_error("report", "give the run's files: stoke report RUN.jsonl "
                                         "[MONITOR.jsonl] [BENCH.json] [TUNE.json]");
    size_t bytes;
    if (stoke_report_write(in, NULL, spec.npos, a.output, &bytes) != STOKE_OK)
        return cli_last_error("report");
    printf("report: %s (%.1f kB)\n", a.output, (double)bytes / 1e3);
    return 0;
}

int cli_report_temp(const char *cmd, const char *report, const char *what, char *path, size_t size)
{
    /* beside the page, hidden: the directory is the user's choice, known writable */
    const char *slash = strrchr(report, '/');
    int dir = slash ? (int)(slash - report + 1) : 0;
    int n = snprintf(path, size, "%.*s.%s.%s-XXXXXX", dir, report, slash ? slash + 1 : report,
                     what);
    if (n < 0 || (size_t)n >= size)
        return cli_error(cmd, "--report %s: the path is too long", report);
    int fd = mkstemp(path);
    if (fd < 0)
        return cli_error(cmd, "--report %s: cannot create a temporary file beside it: %s", report,
                         strerror(errno));
    close(fd);
    return -1;
}

int cli_report_write(const char *cmd, const char *const *inputs, const char *const *names, int n,
                     const char *out)
{
    size_t bytes;
    if (stoke_report_write(inputs, names, n, out, &bytes) != STOKE_OK)
        return cli_error(cmd, "report: %s", stoke_last_error());
    printf("report: %s (%.1f kB)\n", out, (double)bytes / 1e3);
    return 0;
}
