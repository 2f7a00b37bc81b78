/* placeholder until the probe command lands in this session */
#include "cli/cli.h"
#include <stdio.h>
int cmd_probe(int argc, char **argv) { (void)argc; (void)argv; return cli_error("probe", "not built yet"); }
void cmd_probe_usage(void) { puts("usage: stoke probe"); }
