/* sink.c - the live line, JSON lines and CSV of samples (and the JSON lines' closing
 * diagnosis), and the log files they go to. */
#include "stoke/monitor.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/json.h"
#include "core/text.h"
#include "core/tmpfile.h" /* stoke_write_all */

static const char *const throttle_names[] = {
    "gpu_idle",   "app_clocks", "sw_power_cap",   "hw_slowdown",   "sync_boost",
    "sw_thermal", "hw_thermal", "hw_power_brake", "display_clock",
};
#define N_THROTTLE (sizeof throttle_names / sizeof throttle_names[0])

/* ---- Live line --------------------------------------------------------------- */

static void sep(stoke_text *o)
{
    if (o->len)
        stoke_text_add(o, " | ");
}

size_t stoke_mon_format_line(const stoke_mon_sample *s, char *buf, size_t size)
{
    stoke_text o = {buf, size, 0, false};
    if (size)
        buf[0] = '\0';
    for (int g = 0; g < s->gpu_count && g < STOKE_MAX_GPUS; g++) {
        const stoke_gpu_sample *x = &s->gpus[g].s;
        char id[8] = "";
        if (s->gpu_count > 1)
            snprintf(id, sizeof id, "%d", g);
        if (x->valid & STOKE_GS_UTIL) {
            sep(&o);
            stoke_text_add(&o, "GPU%s %u%%", id, x->util_gpu_pct);
        }
        if ((x->valid & STOKE_GS_MEMORY) && x->mem_total_bytes) {
            sep(&o);
            stoke_text_add(&o, "VRAM%s %.1f/%.1f GB (%.0f%%)", id, x->mem_used_bytes / 1e9,
                x->mem_total_bytes / 1e9, 100.0 * x->mem_used_bytes / x->mem_total_bytes);
        }
        if (x->valid & STOKE_GS_POWER) {
            sep(&o);
            if (x->valid & STOKE_GS_POWER_LIMIT)
                stoke_text_add(&o, "PWR%s %.0f/%.0f W", id, x->power_mw / 1000.0, x->power_limit_mw / 1000.0);
            else
                stoke_text_add(&o, "PWR%s %.0f W", id, x->power_mw / 1000.0);
        }
        uint64_t slow = STOKE_THROTTLE_SW_POWER_CAP | STOKE_THROTTLE_HW_POWER_BRAKE |
                        STOKE_THROTTLE_HW_SLOWDOWN | STOKE_THROTTLE_SW_THERMAL |
                        STOKE_THROTTLE_HW_THERMAL;
        if ((x->valid & STOKE_GS_THROTTLE) && (x->throttle_reasons & slow)) {
            sep(&o);
            bool th = x->throttle_reasons & (STOKE_THROTTLE_SW_THERMAL | STOKE_THROTTLE_HW_THERMAL);
            stoke_text_add(&o, "THROTTLE%s %s", id, th ? "thermal" : "power");
        }
    }
    if (s->valid & STOKE_MS_CPU) {
        sep(&o);
        stoke_text_add(&o, "CPU %.0f%%", s->cpu_pct);
    }
    if ((s->valid & STOKE_MS_MEM) && s->mem_total_bytes) {
        sep(&o);
        stoke_text_add(&o, "RAM %.1f/%.1f GB (%.0f%%)", s->mem_used_bytes / 1e9, s->mem_total_bytes / 1e9,
            100.0 * s->mem_used_bytes / s->mem_total_bytes);
    }
    if (s->valid & STOKE_MS_PROC_CPU) {
        sep(&o);
        stoke_text_add(&o, "JOB %.0f%% %dthr %.1f GB", s->proc_cpu_pct, s->proc_threads,
            s->proc_rss_bytes / 1e9);
    }
    if (s->valid & STOKE_MS_PROC_IO) {
        char b[32];
        sep(&o);
        stoke_text_add(&o, "IO %s/s", stoke_format_bytes(s->proc_read_Bps + s->proc_write_Bps, b, sizeof b));
    }
    if (s->valid & STOKE_MS_PIPELINE_RATE) {
        sep(&o);
        stoke_text_add(&o, "DATA %.0f%% %.1f batch/s", s->data_wait_pct, s->batches_per_s);
    }
    if (s->valid & STOKE_MS_RANKS) {
        /* the first ranks' CPU; the JSON lines have them all */
        enum { SHOWN = 8 };
        sep(&o);
        stoke_text_add(&o, "RANKS");
        for (int k = 0; k < s->nrank_procs && k < SHOWN; k++) {
            if (s->rank_procs[k].cpu_valid)
                stoke_text_add(&o, " %d:%.0f%%", s->rank_procs[k].rank, s->rank_procs[k].cpu_pct);
            else
                stoke_text_add(&o, " %d:-", s->rank_procs[k].rank);
        }
        if (s->nrank_procs > SHOWN)
            stoke_text_add(&o, " +%d", s->nrank_procs - SHOWN);
    }
    return o.len;
}

/* ---- JSON lines ------------------------------------------------------------ */

size_t stoke_mon_format_json(const stoke_mon_sample *s, char *buf, size_t size)
{
    stoke_text o = {buf, size, 0, false};
    if (size == 0)
        return 0;
    buf[0] = '\0';
    stoke_text_add(&o, "{\"seq\":%llu,\"t\":%.3f,\"time\":%.3f", (unsigned long long)s->seq, s->t, s->wall);
    if (s->valid & STOKE_MS_CPU)
        stoke_text_add(&o, ",\"cpu_pct\":%.1f,\"iowait_pct\":%.1f", s->cpu_pct, s->iowait_pct);
    stoke_text_add(&o, ",\"ncpu\":%d", s->ncpu);
    if (s->valid & STOKE_MS_MEM)
        stoke_text_add(&o, ",\"mem_used_bytes\":%llu,\"mem_total_bytes\":%llu",
            (unsigned long long)s->mem_used_bytes, (unsigned long long)s->mem_total_bytes);
    if (s->valid & STOKE_MS_PROC) {
        stoke_text_add(&o, ",\"proc\":{\"pid\":%d,\"count\":%d,\"threads\":%d,\"rss_bytes\":%llu", s->proc_pid,
            s->proc_count, s->proc_threads, (unsigned long long)s->proc_rss_bytes);
        if (s->valid & STOKE_MS_PROC_CPU)
            stoke_text_add(&o, ",\"cpu_pct\":%.1f", s->proc_cpu_pct);
        if (s->valid & STOKE_MS_PROC_IO)
            stoke_text_add(&o, ",\"read_Bps\":%.0f,\"write_Bps\":%.0f", s->proc_read_Bps, s->proc_write_Bps);
        if (s->valid & STOKE_MS_PROC_GPU)
            stoke_text_add(&o, ",\"gpu_mem_bytes\":%llu", (unsigned long long)s->proc_gpu_mem_bytes);
        if (s->valid & STOKE_MS_THREAD)
            stoke_text_add(&o, ",\"thread_max_pct\":%.1f,\"thread_max_tid\":%d,\"busy_threads\":%d",
                s->busiest.core_pct, s->busiest.tid, s->busy_threads);
        stoke_text_add(&o, "}");
    }
    if (s->gpu_count > 0) {
        stoke_text_add(&o, ",\"gpus\":[");
        for (int g = 0; g < s->gpu_count && g < STOKE_MAX_GPUS; g++) {
            const stoke_gpu_sample *x = &s->gpus[g].s;
            stoke_text_add(&o, "%s{\"index\":%d", g ? "," : "", g);
            if (x->valid & STOKE_GS_UTIL)
                stoke_text_add(&o, ",\"util_pct\":%u,\"mem_util_pct\":%u", x->util_gpu_pct, x->util_mem_pct);
            if (x->valid & STOKE_GS_MEMORY)
                stoke_text_add(&o, ",\"mem_used_bytes\":%llu,\"mem_total_bytes\":%llu",
                    (unsigned long long)x->mem_used_bytes, (unsigned long long)x->mem_total_bytes);
            if (x->valid & STOKE_GS_POWER)
                stoke_text_add(&o, ",\"power_w\":%.1f", x->power_mw / 1000.0);
            if (x->valid & STOKE_GS_POWER_LIMIT)
                stoke_text_add(&o, ",\"power_limit_w\":%.1f", x->power_limit_mw / 1000.0);
            if (x->valid & STOKE_GS_TEMP)
                stoke_text_add(&o, ",\"temp_c\":%u", x->temp_c);
            if (x->valid & STOKE_GS_SM_CLOCK)
                stoke_text_add(&o, ",\"sm_clock_mhz\":%u", x->sm_clock_mhz);
            if (x->valid & STOKE_GS_THROTTLE) {
                stoke_text_add(&o, ",\"throttle_mask\":%llu,\"throttle\":[",
                    (unsigned long long)x->throttle_reasons);
                int k = 0;
                for (size_t b = 0; b < N_THROTTLE; b++)
                    if (x->throttle_reasons & (1ull << b))
                        stoke_text_add(&o, "%s\"%s\"", k++ ? "," : "", throttle_names[b]);
                stoke_text_add(&o, "]");
            }
            if (x->valid & STOKE_GS_PCIE_RX)
                stoke_text_add(&o, ",\"pcie_rx_Bps\":%llu", (unsigned long long)x->pcie_rx_kBps * 1000ull);
            if (x->valid & STOKE_GS_PCIE_TX)
                stoke_text_add(&o, ",\"pcie_tx_Bps\":%llu", (unsigned long long)x->pcie_tx_kBps * 1000ull);
            if (s->gpus[g].proc_mem_valid)
                stoke_text_add(&o, ",\"proc_mem_bytes\":%llu", (unsigned long long)s->gpus[g].proc_mem_bytes);
            stoke_text_add(&o, "}");
        }
        stoke_text_add(&o, "]");
    }
    if (s->valid & STOKE_MS_PIPELINE) {
        const stoke_mon_pipeline *p = &s->pipe;
        stoke_text_add(&o, ",\"pipeline\":{");
        if (s->valid & STOKE_MS_PIPELINE_RATE)
            stoke_text_add(&o, "\"wait_pct\":%.2f,\"batches_per_s\":%.3f,", s->data_wait_pct,
                s->batches_per_s);
        stoke_text_add(&o,
            "\"batches\":%lld,\"wait_total_s\":%.6f,\"wait_avg_ms\":%.3f,"
            "\"wait_p95_ms\":%.3f,\"wait_max_ms\":%.3f,\"fill_avg\":%.3f,\"slots\":%d,"
            "\"workers\":%d,\"busy_frac\":%.4f}",
            (long long)p->batches, p->wait_total_s, p->wait_avg_ms, p->wait_p95_ms, p->wait_max_ms,
            p->fill_avg, p->slots, p->workers, p->busy_frac);
    }
    if (s->valid & STOKE_MS_RANKS) {
        stoke_text_add(&o, ",\"ranks\":[");
        for (int k = 0; k < s->nrank_procs && k < STOKE_MON_LOCAL_RANKS; k++) {
            const stoke_mon_rank_proc *r = &s->rank_procs[k];
            stoke_text_add(&o, "%s{\"rank\":%d,\"pid\":%d,\"rss_bytes\":%llu", k ? "," : "", r->rank, r->pid,
                (unsigned long long)r->rss_bytes);
            if (r->cpu_valid)
                stoke_text_add(&o, ",\"cpu_pct\":%.1f", r->cpu_pct);
            stoke_text_add(&o, "}");
        }
        stoke_text_add(&o, "]");
    }
    stoke_text_add(&o, "}\n");
    if (o.full) {
        buf[0] = '\0';
        return 0;
    }
    return o.len;
}

/* ---- CSV ------------------------------------------------------------------- */

static const char *const csv_sys_cols =
    "seq,t,time,cpu_pct,iowait_pct,mem_used_bytes,mem_total_bytes,proc_count,proc_cpu_pct,"
    "proc_threads,proc_rss_bytes,proc_read_Bps,proc_write_Bps,proc_gpu_mem_bytes,"
    "pipe_wait_pct,pipe_batches_per_s,pipe_batches,pipe_wait_total_s,pipe_wait_avg_ms,"
    "pipe_wait_p95_ms,pipe_wait_max_ms,pipe_fill_avg,pipe_slots,pipe_workers,pipe_busy_frac";
static const char *const csv_gpu_cols[] = {
    "util_pct",      "mem_util_pct",  "mem_used_bytes", "mem_total_bytes",
    "power_w",       "power_limit_w", "temp_c",         "sm_clock_mhz",
    "throttle_mask", "pcie_rx_Bps",   "pcie_tx_Bps",    "proc_mem_bytes",
};

size_t stoke_mon_format_csv_header(int gpu_count, char *buf, size_t size)
{
    stoke_text o = {buf, size, 0, false};
    if (size == 0)
        return 0;
    stoke_text_add(&o, "%s", csv_sys_cols);
    for (int g = 0; g < gpu_count; g++)
        for (size_t c = 0; c < sizeof csv_gpu_cols / sizeof csv_gpu_cols[0]; c++)
            stoke_text_add(&o, ",gpu%d_%s", g, csv_gpu_cols[c]);
    stoke_text_add(&o, "\n");
    return o.full ? (buf[0] = '\0', 0) : o.len;
}

size_t stoke_mon_format_csv_row(const stoke_mon_sample *s, int gpu_count, char *buf, size_t size)
{
    stoke_text o = {buf, size, 0, false};
    if (size == 0)
        return 0;
    unsigned v = s->valid;
    stoke_text_add(&o, "%llu,%.3f,%.3f", (unsigned long long)s->seq, s->t, s->wall);
    if (v & STOKE_MS_CPU)
        stoke_text_add(&o, ",%.1f,%.1f", s->cpu_pct, s->iowait_pct);
    else
        stoke_text_add(&o, ",,");
    if (v & STOKE_MS_MEM)
        stoke_text_add(&o, ",%llu,%llu", (unsigned long long)s->mem_used_bytes,
            (unsigned long long)s->mem_total_bytes);
    else
        stoke_text_add(&o, ",,");
    if (v & STOKE_MS_PROC)
        stoke_text_add(&o, ",%d", s->proc_count);
    else
        stoke_text_add(&o, ",");
    if (v & STOKE_MS_PROC_CPU)
        stoke_text_add(&o, ",%.1f", s->proc_cpu_pct);
    else
        stoke_text_add(&o, ",");
    if (v & STOKE_MS_PROC)
        stoke_text_add(&o, ",%d,%llu", s->proc_threads, (unsigned long long)s->proc_rss_bytes);
    else
        stoke_text_add(&o, ",,");
    if (v & STOKE_MS_PROC_IO)
        stoke_text_add(&o, ",%.0f,%.0f", s->proc_read_Bps, s->proc_write_Bps);
    else
        stoke_text_add(&o, ",,");
    if (v & STOKE_MS_PROC_GPU)
        stoke_text_add(&o, ",%llu", (unsigned long long)s->proc_gpu_mem_bytes);
    else
        stoke_text_add(&o, ",");
    if (v & STOKE_MS_PIPELINE_RATE)
        stoke_text_add(&o, ",%.2f,%.3f", s->data_wait_pct, s->batches_per_s);
    else
        stoke_text_add(&o, ",,");
    if (v & STOKE_MS_PIPELINE) {
        const stoke_mon_pipeline *p = &s->pipe;
        stoke_text_add(&o, ",%lld,%.6f,%.3f,%.3f,%.3f,%.3f,%d,%d,%.4f", (long long)p->batches, p->wait_total_s,
            p->wait_avg_ms, p->wait_p95_ms, p->wait_max_ms, p->fill_avg, p->slots, p->workers,
            p->busy_frac);
    } else {
        stoke_text_add(&o, ",,,,,,,,,");
    }
    for (int g = 0; g < gpu_count; g++) {
        if (g >= s->gpu_count || g >= STOKE_MAX_GPUS) {
            stoke_text_add(&o, ",,,,,,,,,,,,");
            continue;
        }
        const stoke_gpu_sample *x = &s->gpus[g].s;
        if (x->valid & STOKE_GS_UTIL)
            stoke_text_add(&o, ",%u,%u", x->util_gpu_pct, x->util_mem_pct);
        else
            stoke_text_add(&o, ",,");
        if (x->valid & STOKE_GS_MEMORY)
            stoke_text_add(&o, ",%llu,%llu", (unsigned long long)x->mem_used_bytes,
                (unsigned long long)x->mem_total_bytes);
        else
            stoke_text_add(&o, ",,");
        if (x->valid & STOKE_GS_POWER)
            stoke_text_add(&o, ",%.1f", x->power_mw / 1000.0);
        else
            stoke_text_add(&o, ",");
        if (x->valid & STOKE_GS_POWER_LIMIT)
            stoke_text_add(&o, ",%.1f", x->power_limit_mw / 1000.0);
        else
            stoke_text_add(&o, ",");
        if (x->valid & STOKE_GS_TEMP)
            stoke_text_add(&o, ",%u", x->temp_c);
        else
            stoke_text_add(&o, ",");
        if (x->valid & STOKE_GS_SM_CLOCK)
            stoke_text_add(&o, ",%u", x->sm_clock_mhz);
        else
            stoke_text_add(&o, ",");
        if (x->valid & STOKE_GS_THROTTLE)
            stoke_text_add(&o, ",%llu", (unsigned long long)x->throttle_reasons);
        else
            stoke_text_add(&o, ",");
        if (x->valid & STOKE_GS_PCIE_RX)
            stoke_text_add(&o, ",%llu", (unsigned long long)x->pcie_rx_kBps * 1000ull);
        else
            stoke_text_add(&o, ",");
        if (x->valid & STOKE_GS_PCIE_TX)
            stoke_text_add(&o, ",%llu", (unsigned long long)x->pcie_tx_kBps * 1000ull);
        else
            stoke_text_add(&o, ",");
        if (s->gpus[g].proc_mem_valid)
            stoke_text_add(&o, ",%llu", (unsigned long long)s->gpus[g].proc_mem_bytes);
        else
            stoke_text_add(&o, ",");
    }
    stoke_text_add(&o, "\n");
    return o.full ? (buf[0] = '\0', 0) : o.len;
}

/* ---- Files ------------------------------------------------------------------ */

stoke_status stoke_mon_open_log(const char *path, bool append, int *fd)
{
    /* O_NONBLOCK: open() of a FIFO for writing waits for a reader, forever if none
     * comes; non-blocking, it fails with ENXIO instead. Writes then block as usual. */
    *fd =
        open(path, O_WRONLY | O_CREAT | (append ? 0 : O_TRUNC) | O_APPEND | O_CLOEXEC | O_NONBLOCK,
             0644);
    if (*fd < 0)
        return stoke_fail(STOKE_ERR_IO, "cannot open '%s' for writing: %s", path,
                          errno == ENXIO ? "a FIFO (named pipe) with no reader" : strerror(errno));
    int fl = fcntl(*fd, F_GETFL);
    if (fl < 0 || fcntl(*fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        int e = errno;
        close(*fd);
        *fd = -1;
        return stoke_fail(STOKE_ERR_IO, "cannot open '%s' for writing: %s", path, strerror(e));
    }
    return STOKE_OK;
}

stoke_status stoke_mon_write_line(int fd, const char *buf, size_t len, const char *what)
{
    if (stoke_write_all(fd, buf, len) == len)
        return STOKE_OK;
    int e = errno;
    return stoke_fail(STOKE_ERR_IO, "cannot write to '%s': %s%s", what,
                      e == 0 ? "no progress" : strerror(e),
                      e == EFBIG ? " (the file size limit, ulimit -f)" : "");
}

char *stoke_mon_format_diagnosis_json(const stoke_finding *f, size_t n, double t, double wall)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *list = NULL;
    char num[64];
    if (o) {
        cJSON_AddStringToObject(o, "type", "diagnosis");
        snprintf(num, sizeof num, "%.3f", wall); /* as the samples' */
        cJSON_AddRawToObject(o, "time", num);
        snprintf(num, sizeof num, "%.3f", t);
        cJSON_AddRawToObject(o, "t", num);
        list = cJSON_AddArrayToObject(o, "findings");
    }
    bool ok = list != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        cJSON *x = stoke_finding_json(&f[i]);
        ok = x && cJSON_AddItemToArray(list, x);
    }
    char *js = ok ? stoke_json_print(o, false) : NULL;
    cJSON_Delete(o);
    size_t len = js ? strlen(js) : 0;
    char *line = js ? realloc(js, len + 2) : NULL;
    if (!line) {
        free(js);
        return NULL;
    }
    memcpy(line + len, "\n", 2);
    return line;
}
