/* placeholder until the monitor command lands in this session */
#include "cli/cli.h"
#include <stdio.h>
int cmd_monitor(int argc, char **argv) { (void)argc; (void)argv; return cli_error("monitor", "not built yet"); }
void cmd_monitor_usage(void) { puts("usage: stoke monitor"); }
