/* prom.c - the Prometheus text exposition (format 0.0.4) of a monitor sample and of a
 * training run's progress, and the listening address of the exporter. GPU readings
 * carry dcgm-exporter's names and units, so its dashboards read stoke; the rest are
 * stoke_* in base units (seconds, bytes, ratios 0..1). docs/prometheus.md lists them. */
#include "stoke/monitor.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/text.h"
#include "stoke/core.h"

static void family(stoke_text *o, const char *name, const char *type, const char *help)
{
    stoke_text_add(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample line; non-finite values are not readings and are left out. %.15g keeps
 * counters exact up to 10^15. */
static void value(stoke_text *o, const char *name, const char *labels, double v)
{
    if (!isfinite(v))
        return;
    stoke_text_add(o, "%s%s%s%s %.15g\n", name, labels[0] ? "{" : "", labels, labels[0] ? "}" : "", v);
}

/* A family with one unlabelled sample, left out entirely when v is not a reading. */
static void gauge1(stoke_text *o, const char *name, const char *type, const char *help, double v)
{
    if (!isfinite(v))
        return;
    family(o, name, type, help);
    value(o, name, "", v);
}

void stoke_prom_escape(const char *v, char *buf, size_t size)
{
    size_t n = 0;
    if (!size)
        return;
    for (; *v; v++) {
        const char *rep = *v == '\\' ? "\\\\" : *v == '"' ? "\\\"" : *v == '\n' ? "\\n" : NULL;
        size_t k = rep ? 2 : 1;
        /* never cut a UTF-8 sequence: stop before a lead byte whose tail does not fit */
        unsigned char c = (unsigned char)*v;
        size_t seq = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
        if (n + (rep ? k : seq) >= size)
            break;
        if (rep) {
            memcpy(buf + n, rep, 2);
            n += 2;
        } else {
            buf[n++] = *v;
        }
    }
    buf[n] = '\0';
}

/* ---- per GPU ----------------------------------------------------------------- */

typedef double (*gpu_reading)(const stoke_mon_gpu *g);

static double g_util(const stoke_mon_gpu *g)
{
    return g->s.valid & STOKE_GS_UTIL ? g->s.util_gpu_pct : NAN;
}
static double g_mem_util(const stoke_mon_gpu *g)
{
    return g->s.valid & STOKE_GS_UTIL ? g->s.util_mem_pct : NAN;
}
static double g_fb_used(const stoke_mon_gpu *g)
{
    return g->s.valid & STOKE_GS_MEMORY ? (double)g->s.mem_used_bytes / 1048576.0 : NAN;
}
static double g_fb_free(const stoke_mon_gpu *g)
{
    if (!(g->s.valid & STOKE_GS_MEMORY) || g->s.mem_total_bytes < g->s.mem_used_bytes)
        return NAN;
    return (double)(g->s.mem_total_bytes - g->s.mem_used_bytes) / 1048576.0;
}
static double g_power(const stoke_mon_gpu *g)
{
    return g->s.valid & STOKE_GS_POWER ? g->s.power_mw / 1000.0 : NAN;
}
static double g_power_limit(const stoke_mon_gpu *g)
{
    return g->s.valid & STOKE_GS_POWER_LIMIT ? g->s.power_limit_mw / 1000.0 : NAN;
}
static double g_temp(const stoke_mon_gpu *g)
{
    return g->s.valid & STOKE_GS_TEMP ? g->s.temp_c : NAN;
}
static double g_sm_clock(const stoke_mon_gpu *g)
{
    return g->s.valid & STOKE_GS_SM_CLOCK ? g->s.sm_clock_mhz : NAN;
}
static double g_throttle(const stoke_mon_gpu *g)
{
    return g->s.valid & STOKE_GS_THROTTLE ? (double)g->s.throttle_reasons : NAN;
}
static double g_pcie_tx(const stoke_mon_gpu *g)
{
    return g->s.valid & STOKE_GS_PCIE_TX ? g->s.pcie_tx_kBps * 1024.0 : NAN;
}
static double g_pcie_rx(const stoke_mon_gpu *g)
{
    return g->s.valid & STOKE_GS_PCIE_RX ? g->s.pcie_rx_kBps * 1024.0 : NAN;
}
static double g_proc_mem(const stoke_mon_gpu *g)
{
    return g->proc_mem_valid ? (double)g->proc_mem_bytes : NAN;
}

static const struct gpu_metric {
    const char *name, *help;
    gpu_reading read;
} gpu_metrics[] = {
    {"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", g_util},
    {"DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", g_mem_util},
    {"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", g_fb_used},
    {"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", g_fb_free},
    {"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", g_power},
    {"DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", g_temp},
    {"DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", g_sm_clock},
    {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "Throttling reasons, NVML's bitmask.", g_throttle},
    {"DCGM_FI_PROF_PCIE_TX_BYTES", "PCIe bytes transmitted per second.", g_pcie_tx},
    {"DCGM_FI_PROF_PCIE_RX_BYTES", "PCIe bytes received per second.", g_pcie_rx},
    {"stoke_gpu_power_limit_watts", "Enforced power limit of the GPU.", g_power_limit},
    {"stoke_gpu_process_memory_bytes", "GPU memory held by the watched process tree.",
     g_proc_mem},
};

static void gpus(stoke_text *o, const stoke_mon_sample *s)
{
    int n = s->gpu_count < 0 ? 0 : s->gpu_count > STOKE_MAX_GPUS ? STOKE_MAX_GPUS : s->gpu_count;
    char labels[STOKE_MAX_GPUS][520];
    for (int i = 0; i < n; i++) {
        char uuid[200], name[200];
        stoke_prom_escape(s->gpus[i].uuid, uuid, sizeof uuid);
        stoke_prom_escape(s->gpus[i].name, name, sizeof name);
        snprintf(labels[i], sizeof labels[i], "gpu=\"%d\",uuid=\"%s\",name=\"%s\"", i, uuid, name);
    }
    for (size_t m = 0; m < sizeof gpu_metrics / sizeof *gpu_metrics; m++) {
        bool any = false;
        for (int i = 0; i < n && !any; i++)
            any = isfinite(gpu_metrics[m].read(&s->gpus[i]));
        if (!any)
            continue;
        family(o, gpu_metrics[m].name, "gauge", gpu_metrics[m].help);
        for (int i = 0; i < n; i++)
            value(o, gpu_metrics[m].name, labels[i], gpu_metrics[m].read(&s->gpus[i]));
    }
}

/* ---- host, process tree, input pipeline ----------------------------------------- */

static void host(stoke_text *o, const stoke_mon_sample *s)
{
    bool cpu = s->valid & STOKE_MS_CPU, mem = s->valid & STOKE_MS_MEM;
    gauge1(o, "stoke_host_cpu_busy_ratio", "gauge",
           "Share of all CPUs busy (not idle, not iowait), 0..1.", cpu ? s->cpu_pct / 100 : NAN);
    gauge1(o, "stoke_host_cpu_iowait_ratio", "gauge", "Share of all CPUs waiting on I/O, 0..1.",
           cpu ? s->iowait_pct / 100 : NAN);
    gauge1(o, "stoke_host_cpus", "gauge", "CPUs counted in /proc/stat.",
           cpu && s->ncpu > 0 ? s->ncpu : NAN);
    gauge1(o, "stoke_host_memory_used_bytes", "gauge", "MemTotal - MemAvailable.",
           mem ? (double)s->mem_used_bytes : NAN);
    gauge1(o, "stoke_host_memory_total_bytes", "gauge", "MemTotal.",
           mem ? (double)s->mem_total_bytes : NAN);

    bool proc = s->valid & STOKE_MS_PROC;
    gauge1(o, "stoke_process_pid", "gauge", "PID of the watched process (the tree's root).",
           proc && s->proc_pid > 0 ? s->proc_pid : NAN);
    gauge1(o, "stoke_process_processes", "gauge", "Processes in the watched tree.",
           proc ? s->proc_count : NAN);
    gauge1(o, "stoke_process_threads", "gauge", "Threads of the watched tree.",
           proc ? s->proc_threads : NAN);
    gauge1(o, "stoke_process_resident_memory_bytes", "gauge",
           "RSS summed over the watched tree.", proc ? (double)s->proc_rss_bytes : NAN);
    gauge1(o, "stoke_process_cpu_cores", "gauge",
           "CPU of the watched tree in cores (1 = one core busy).",
           s->valid & STOKE_MS_PROC_CPU ? s->proc_cpu_pct / 100 : NAN);
    bool io = s->valid & STOKE_MS_PROC_IO;
    gauge1(o, "stoke_process_read_bytes_per_second", "gauge",
           "Storage reads of the watched tree (/proc/PID/io).", io ? s->proc_read_Bps : NAN);
    gauge1(o, "stoke_process_write_bytes_per_second", "gauge",
           "Storage writes of the watched tree (/proc/PID/io).", io ? s->proc_write_Bps : NAN);
    gauge1(o, "stoke_process_gpu_memory_bytes", "gauge",
           "GPU memory held by the watched tree, all GPUs.",
           s->valid & STOKE_MS_PROC_GPU ? (double)s->proc_gpu_mem_bytes : NAN);
    if (s->valid & STOKE_MS_THREAD) {
        char comm[64], labels[128];
        stoke_prom_escape(s->busiest.comm, comm, sizeof comm);
        snprintf(labels, sizeof labels, "thread=\"%s\"", comm);
        family(o, "stoke_process_busiest_thread_cores", "gauge",
               "CPU of the tree's busiest thread in cores; label: its name.");
        value(o, "stoke_process_busiest_thread_cores", labels, s->busiest.core_pct / 100);
        gauge1(o, "stoke_process_busy_threads", "gauge", "Threads of the tree that were busy.",
               s->busy_threads);
    }
}

static void pipeline(stoke_text *o, const stoke_mon_sample *s)
{
    if (s->valid & STOKE_MS_PIPELINE) {
        const stoke_mon_pipeline *p = &s->pipe;
        gauge1(o, "stoke_input_wait_seconds_total", "counter",
               "Time the consumer waited for batches.", p->wait_total_s);
        gauge1(o, "stoke_input_batches_total", "counter", "Batches handed out.",
               (double)p->batches);
        gauge1(o, "stoke_input_wait_p95_seconds", "gauge",
               "p95 of the consumer's wait per batch (recent batches).", p->wait_p95_ms / 1e3);
        gauge1(o, "stoke_input_wait_max_seconds", "gauge",
               "Longest wait of the consumer for a batch.", p->wait_max_ms / 1e3);
        gauge1(o, "stoke_input_ring_fill_batches", "gauge",
               "Batches ready when the consumer asked (mean).", p->fill_avg);
        gauge1(o, "stoke_input_ring_slots", "gauge", "Prefetch depth (ring slots).", p->slots);
        gauge1(o, "stoke_input_workers", "gauge", "Loader worker threads.", p->workers);
        gauge1(o, "stoke_input_worker_busy_ratio", "gauge",
               "Mean busy share of the loader workers, 0..1.", p->workers ? p->busy_frac : NAN);
    }
    if (s->valid & STOKE_MS_PIPELINE_RATE) {
        gauge1(o, "stoke_input_data_wait_ratio", "gauge",
               "Share of the last sample's window the consumer waited for data, 0..1.",
               s->data_wait_pct / 100);
        gauge1(o, "stoke_input_batches_per_second", "gauge",
               "Batches handed out per second over the last sample's window.", s->batches_per_s);
    }
}

/* ---- training ------------------------------------------------------------------- */

static void train(stoke_text *o, const stoke_prom_train *t)
{
    gauge1(o, "stoke_train_steps_total", "counter", "Optimizer steps so far.", (double)t->steps);
    gauge1(o, "stoke_train_epoch", "gauge", "The epoch running, from 1.", (double)t->epoch);
    gauge1(o, "stoke_train_epochs", "gauge", "Epochs of the run.", (double)t->epochs);
    gauge1(o, "stoke_train_samples_per_second", "gauge", "Training samples per second (epoch).",
           t->samples_per_s);
    gauge1(o, "stoke_train_data_wait_ratio", "gauge",
           "Share of the epoch's time spent waiting for batches, 0..1.", t->data_wait_ratio);
    gauge1(o, "stoke_train_loss", "gauge", "Running mean training loss of the epoch.", t->loss);
    gauge1(o, "stoke_train_learning_rate", "gauge", "Learning rate of the last step.", t->lr);
    gauge1(o, "stoke_train_mfu_ratio", "gauge",
           "Model FLOP utilization: matmul and convolution FLOP/s over the device's peak.",
           t->mfu_ratio);
    if (t->metric_is_acc) {
        gauge1(o, "stoke_train_accuracy_ratio", "gauge", "Running training accuracy, 0..1.",
               t->metric);
        gauge1(o, "stoke_train_validation_accuracy_ratio", "gauge",
               "Validation accuracy of the last evaluation, 0..1.", t->val_metric);
    } else {
        gauge1(o, "stoke_train_mean_absolute_error", "gauge", "Running training MAE.",
               t->metric);
        gauge1(o, "stoke_train_validation_mean_absolute_error", "gauge",
               "Validation MAE of the last evaluation.", t->val_metric);
    }
    gauge1(o, "stoke_train_validation_loss", "gauge", "Validation loss of the last evaluation.",
           t->val_loss);
    static const char *const phases[5] = {"input", "forward", "backward", "optimizer",
                                          "allreduce"};
    bool any = false;
    for (int i = 0; i < 5; i++)
        any |= isfinite(t->phase_ratio[i]);
    if (any) {
        family(o, "stoke_train_phase_ratio", "gauge",
               "Share of the epoch's time in each phase of the step, 0..1.");
        for (int i = 0; i < 5; i++) {
            char labels[32];
            snprintf(labels, sizeof labels, "phase=\"%s\"", phases[i]);
            value(o, "stoke_train_phase_ratio", labels, t->phase_ratio[i]);
        }
    }
    gauge1(o, "stoke_train_elapsed_seconds", "gauge", "Seconds since the training loop started.",
           t->elapsed_s);
    gauge1(o, "stoke_train_world_size", "gauge", "Ranks of the run (1: one process).",
           t->world > 0 ? t->world : 1);
}

size_t stoke_prom_format(const stoke_mon_sample *s, const stoke_prom_train *t,
                         const char *command, char *buf, size_t size)
{
    stoke_text o = {.buf = buf, .size = size};
    if (!size)
        return 0;
    buf[0] = '\0';
    char cmd[64];
    stoke_prom_escape(command ? command : "", cmd, sizeof cmd);
    family(&o, "stoke_info", "gauge", "stoke's version and command; always 1.");
    stoke_text_add(&o, "stoke_info{version=\"%s\",command=\"%s\"} 1\n", STOKE_VERSION, cmd);
    if (s) {
        gauge1(&o, "stoke_monitor_samples_total", "counter", "Samples the monitor took.",
               (double)s->seq);
        gauge1(&o, "stoke_monitor_last_sample_timestamp_seconds", "gauge",
               "Unix time of the latest sample.", s->wall);
        gpus(&o, s);
        host(&o, s);
        pipeline(&o, s);
    }
    if (t && t->valid)
        train(&o, t);
    if (o.full) {
        buf[0] = '\0';
        return 0;
    }
    return o.len;
}

/* ---- the address ------------------------------------------------------------------ */

stoke_status stoke_prom_parse_addr(const char *text, stoke_prom_addr *out)
{
    memset(out, 0, sizeof *out);
    const char *orig = text;
    const char *colon = strrchr(text, ':');
    if (!colon)
        return stoke_fail(STOKE_ERR_ARG, "--prometheus '%s': expected ADDR:PORT, [V6]:PORT or :PORT",
                          text);
    char host[128];
    size_t hl = (size_t)(colon - text);
    if (text[0] == '[') {
        if (hl < 2 || text[hl - 1] != ']')
            return stoke_fail(STOKE_ERR_ARG,
                              "--prometheus '%s': an IPv6 address goes in brackets, [::1]:PORT",
                              text);
        text++;
        hl -= 2;
    } else if (memchr(text, ':', hl)) {
        return stoke_fail(STOKE_ERR_ARG,
                          "--prometheus '%s': an IPv6 address goes in brackets, [::1]:PORT", text);
    }
    if (hl >= sizeof host)
        return stoke_fail(STOKE_ERR_ARG, "--prometheus: the address is too long");
    memcpy(host, text, hl);
    host[hl] = '\0';
    const char *p = colon + 1;
    char *end;
    long port = strtol(p, &end, 10);
    if (!*p || *end || p[0] == '-' || p[0] == '+' || port < 0 || port > 65535)
        return stoke_fail(STOKE_ERR_ARG,
                          "--prometheus '%s': the port must be a number from 0 to 65535 (0: a "
                          "free one)",
                          colon + 1);
    out->port = (int)port;
    if (!host[0] || !strcmp(host, "localhost")) {
        out->family = AF_INET;
        out->addr[0] = 127;
        out->addr[3] = 1;
    } else if (inet_pton(AF_INET, host, out->addr) == 1) {
        out->family = AF_INET;
    } else if (inet_pton(AF_INET6, host, out->addr) == 1) {
        out->family = AF_INET6;
    } else {
        return stoke_fail(STOKE_ERR_ARG,
                          "--prometheus '%s': '%s' is not a numeric IPv4 or IPv6 address (or "
                          "localhost)",
                          orig, host);
    }
    static const unsigned char v6_loop[16] = {[15] = 1};
    out->loopback = out->family == AF_INET ? out->addr[0] == 127
                                           : !memcmp(out->addr, v6_loop, sizeof v6_loop);
    return STOKE_OK;
}

void stoke_prom_format_addr(const stoke_prom_addr *a, int port, char *buf, size_t size)
{
    char h[INET6_ADDRSTRLEN] = "?";
    inet_ntop(a->family, a->addr, h, sizeof h);
    if (a->family == AF_INET6)
        snprintf(buf, size, "[%s]:%d", h, port);
    else
        snprintf(buf, size, "%s:%d", h, port);
}
