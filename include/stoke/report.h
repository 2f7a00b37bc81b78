/* report.h - `stoke report`: one self-contained HTML page (inline SVG, no script, no
 * request) drawn from a run's files: the training log (`stoke train --log`), the
 * monitor's JSON lines (`stoke monitor --jsonl`), `stoke bench --json` and `stoke tune
 * --json`. docs/report.md. */
#ifndef STOKE_REPORT_PUBLIC_H
#define STOKE_REPORT_PUBLIC_H

#include <stddef.h>

#include "stoke/core.h"

/* Reads the n inputs, in any order, each kind recognised by its content (at most one
 * of each; an empty file is an empty training log), and writes the page to `out`
 * whole or not at all (a temporary file beside it, renamed). Streams the logs: a
 * million lines take bounded memory, each plot at most 2,000 points a series. Errors
 * name the file and, for a bad line, its number (STOKE_ERR_FORMAT), two inputs of one
 * kind (STOKE_ERR_ARG), or the output (STOKE_ERR_IO). names (NULL, or NULL entries:
 * the paths) are what the page and the messages call the inputs (a temporary file of
 * `--report`: "the run's embedded monitor"). *bytes (may be NULL): the page's size. */
stoke_status stoke_report_write(const char *const *inputs, const char *const *names, int n,
                                const char *out, size_t *bytes);

#endif
