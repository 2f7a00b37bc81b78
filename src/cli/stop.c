/* stop.c - SIGINT and SIGTERM asking a long run (train, bench) to stop after its
 * current step. One handler for the commands, so each exits 128 + the signal that
 * stopped it (130 or 143), as a shell reports a process the signal killed. */
#include <signal.h>

#include "cli/cli.h"

volatile int cli_stop_flag;
static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    cli_stop_flag = 1;
    if (!stop_signal)
        stop_signal = sig;
    /* A second signal ends the process at once. */
    signal(sig, SIG_DFL);
}

void cli_stop_catch(void)
{
    cli_stop_flag = 0;
    stop_signal = 0;
    /* SA_ONSTACK: on the thread's alternate stack, never at an rsp that oneDNN's JIT
     * GEMMs pointed at the heap (core/sigstack.h) */
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_ONSTACK};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

void cli_stop_release(void)
{
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
}

int cli_stop_signal(void)
{
    return stop_signal;
}

const char *cli_stop_signal_name(void)
{
    return stop_signal == SIGINT ? "SIGINT" : stop_signal == SIGTERM ? "SIGTERM" : "";
}
