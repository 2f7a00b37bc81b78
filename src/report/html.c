/* html.c - the report page: one self-contained HTML file, no script, no request (its
 * Content-Security-Policy allows inline styles and data: images only). Sections: the
 * diagnosis in words, training, utilization, the loader, tuning and bench. Every text
 * from the inputs is escaped (rp_esc). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/text.h"
#include "report/report.h"
#include "stoke/core.h"

static const char css[] =
    "body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:800px;color:#222}"
    "h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;margin-top:32px}"
    "figure{margin:12px 0}svg{background:#fff;display:block}"
    ".frame{fill:none;stroke:#888}.grid{stroke:#eee}.tick{stroke:#888}"
    ".xt,.xl{text-anchor:middle;font-size:11px}.yt{text-anchor:end;font-size:11px}"
    ".yl{text-anchor:middle;font-size:11px}.title{font-weight:600;font-size:13px}"
    ".lg{font-size:11px}.series{fill:none;stroke-width:1.6}.band{stroke:none;opacity:.85}"
    ".throttle{fill:#f4c7c3;opacity:.6}.val{font-size:11px}.bl{text-anchor:end;font-size:11px}"
    ".bar{fill:#1f77b4}.bar.chosen{fill:#2ca02c;stroke:#111;stroke-width:1.5}"
    ".bv,.failed{font-size:11px}.failed{fill:#d62728}"
    ".nodata{color:#a33;background:#fbeeee;padding:8px}.note{color:#555;font-size:12px;margin:2px 0}"
    ".finding{border-left:4px solid #d62728;padding:4px 10px;margin:8px 0;background:#fafafa}"
    ".absent{color:#666;font-style:italic}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child{text-align:left}";

static void why_absent(rp_buf *b, const char *what)
{
    rp_puts(b, "<p class=\"absent\">");
    rp_esc(b, what);
    rp_puts(b, "</p>\n");
}

/* Why a training plot has nothing to draw. */
static void run_empty(const rp_report *r, char *why, size_t n, const char *what)
{
    if (!r->path[RP_RUN][0])
        stoke_say(why, n, "no training log given (stoke train --log run.jsonl writes one)");
    else if (r->run_lines == 0)
        stoke_say(why, n, "%s is empty", r->path[RP_RUN]);
    else if (r->run_records <= 1)
        stoke_say(why, n, "%s has only its start record: the run logged no step", r->path[RP_RUN]);
    else
        stoke_say(why, n, "%s has no %s", r->path[RP_RUN], what);
}

static void summary(const rp_report *r, rp_buf *b)
{
    rp_puts(b, "<p class=\"summary\">");
    if (!r->path[RP_RUN][0]) {
        rp_puts(b, "No training log given.");
    } else if (r->run_records == 0) {
        rp_esc(b, r->path[RP_RUN]);
        rp_puts(b, r->run_lines ? " has no training record." : " is empty: no run to describe.");
    } else {
        char t[96];
        rp_puts(b, "Model <b>");
        rp_esc(b, r->model[0] ? r->model : "?");
        rp_puts(b, "</b> on ");
        rp_esc(b, r->dataset[0] ? r->dataset : "?");
        rp_puts(b, ", device ");
        rp_esc(b, r->device[0] ? r->device : "?");
        if (r->precision[0]) {
            rp_puts(b, ", ");
            rp_esc(b, r->precision);
        }
        rp_printf(b, ", batch %lld; %lld of %lld epochs", (long long)r->batch,
                  (long long)r->epochs_done, (long long)r->epochs_planned);
        if (isfinite(r->final_val_acc))
            rp_printf(b, ", final val acc %.2f%%", r->final_val_acc);
        if (isfinite(r->last_sps)) {
            rp_num(t, sizeof t, r->last_sps);
            rp_printf(b, ", %s samples/s (last epoch)", t);
        }
        rp_printf(b, ", %.1f s of training.", r->last_elapsed);
    }
    rp_puts(b, "</p>\n");
}

static void findings(const rp_report *r, rp_buf *b)
{
    rp_puts(b, "<section id=\"diagnosis\"><h2>Diagnosis and recommendations</h2>\n");
    if (r->nfindings == 0) {
        const char *given[] = {"the training log's findings", "the monitor's diagnosis",
                               "bench's robustness and diagnoses"};
        bool any = r->path[RP_RUN][0] || r->path[RP_MONITOR][0] || r->path[RP_BENCH][0];
        rp_printf(b, "<p>%s</p>\n", any ? "No finding: nothing bounded the run that the rules "
                                          "recognise."
                                        : "");
        if (!any)
            why_absent(b, "No input with a diagnosis given: a training log, a monitor log or a "
                          "bench report fill it.");
        (void)given;
    }
    /* the run's own findings first, then the monitor's, then bench's */
    static const char *const order[] = {"train", "monitor", "bench"};
    for (int j = 0; j < 3 * r->nfindings; j++) {
        const rp_finding *f = &r->findings[j % r->nfindings];
        if (strcmp(f->source, order[j / r->nfindings]))
            continue;
        rp_puts(b, "<div class=\"finding\"><b>");
        rp_esc(b, f->rule);
        rp_puts(b, "</b>");
        if (f->resource[0]) {
            rp_puts(b, " (");
            rp_esc(b, f->resource);
            rp_puts(b, ")");
        }
        rp_puts(b, " <small>from the ");
        rp_esc(b, f->source);
        if (f->repeats)
            rp_printf(b, ", and %d more record%s of it", f->repeats, f->repeats == 1 ? "" : "s");
        rp_puts(b, "</small><br>");
        rp_esc(b, f->evidence);
        if (f->advice[0]) {
            rp_puts(b, "<br><b>Advice:</b> ");
            rp_esc(b, f->advice);
        }
        if (f->numbers[0]) {
            rp_puts(b, "<br><small>");
            rp_esc(b, f->numbers);
            rp_puts(b, "</small>");
        }
        rp_puts(b, "</div>\n");
    }
    if (r->findings_dropped)
        rp_printf(b, "<p class=\"note\">%d more findings not shown</p>\n", r->findings_dropped);
    if (r->robustness[0]) {
        rp_puts(b, "<p>");
        rp_esc(b, r->robustness);
        rp_puts(b, "</p>\n");
    }
    rp_puts(b, "</section>\n");
}

static void training(const rp_report *r, rp_buf *b)
{
    char why[700];
    rp_puts(b, "<section id=\"training\"><h2>Training</h2>\n");
    run_empty(r, why, sizeof why, "step or epoch records");
    for (int t = 0; t < 2; t++) {
        bool x2 = t == 1;
        const char *xl = x2 ? "wall time (s)" : "step";
        rp_plot_series loss[] = {{&r->loss, "train (epoch mean)", x2, 0, false},
                                 {&r->batch_loss, "batch", x2, 0, false},
                                 {&r->val_loss, "validation", x2, 0, false}};
        rp_plot_lines(b, x2 ? "loss-time" : "loss", x2 ? "Loss against wall time" : "Loss", xl,
                      "loss", loss, 3, NULL, 0, why);
        rp_plot_series acc[] = {{&r->acc, "train", x2, 0, false}, {&r->val_acc, "validation", x2, 0, false}};
        rp_plot_lines(b, x2 ? "accuracy-time" : "accuracy",
                      x2 ? "Accuracy against wall time" : "Accuracy", xl, "accuracy (%)", acc, 2,
                      NULL, 0, why);
    }
    rp_plot_series lr[] = {{&r->lr, "learning rate", false, 0, false}};
    rp_plot_lines(b, "lr", "Learning rate", "step", "lr", lr, 1, NULL, 0, why);
    rp_plot_series sps[] = {{&r->sps, "samples/s (epoch so far)", false, 0, false}};
    rp_plot_lines(b, "throughput", "Samples per second", "step", "samples/s", sps, 1, NULL, 0,
                  why);
    rp_plot_series mfu[] = {{&r->mfu, "MFU (epoch)", false, 0, false}};
    char why_mfu[800];
    if (r->run_records > 1 && r->epochs_done > 0)
        stoke_say(why_mfu, sizeof why_mfu, "%s has no MFU (the device's peak is unknown)",
                 r->path[RP_RUN]);
    else
        run_empty(r, why_mfu, sizeof why_mfu, "epoch records");
    rp_plot_lines(b, "mfu", "Model FLOP utilization", "step", "MFU (%)", mfu, 1, NULL, 0, why_mfu);
    rp_plot_series w[] = {{&r->wait, "data wait (epoch so far)", false, 0, true}};
    rp_plot_lines(b, "data-wait", "Data-wait share", "step", "% of the time waiting for data", w,
                  1, NULL, 0, why);
    /* the data wait is a band of its own: the phases are the step's share of the epoch, the
     * wait for batches the rest of it, so an input-bound run reads as one tall band */
    static const char *const names[] = {"data_wait", "input",     "forward",
                                        "backward",  "optimizer", "allreduce"};
    static const char *const labels[] = {"waiting for data", "input (+ copy wait on a GPU)",
                                         "forward", "backward", "optimizer", "all-reduce"};
    rp_plot_stack(b, "breakdown", "Step breakdown", &r->phase, names, labels,
                  r->has_allreduce ? 6 : 5, why);
    rp_puts(b, "<p class=\"note\">The log has no separate copy phase: on a GPU the input band "
               "includes the wait for the host-to-device copy.</p>\n</section>\n");
}

static void utilization(const rp_report *r, rp_buf *b)
{
    char why[700];
    rp_puts(b, "<section id=\"utilization\"><h2>Utilization</h2>\n");
    if (!r->path[RP_MONITOR][0]) {
        why_absent(b, "No monitor log given: stoke monitor --jsonl mon.jsonl -- COMMAND (or stoke "
                      "train --report, which records its own) fills this section.");
        rp_puts(b, "</section>\n");
        return;
    }
    if (r->mon_lines == 0)
        stoke_say(why, sizeof why, "%s is empty", r->path[RP_MONITOR]);
    else
        stoke_say(why, sizeof why, "%s has no such readings", r->path[RP_MONITOR]);
    rp_plot_series cpu[] = {{&r->cpu, "CPU (all CPUs)", false, 0, true}};
    rp_plot_lines(b, "cpu", "CPU utilization", "time (s)", "% of all CPUs", cpu, 1, NULL, 0, why);
    rp_plot_series mem[] = {{&r->host_mem, "host memory used", false, 1.0 / (1 << 30), false}};
    rp_plot_lines(b, "host-mem", "Host memory", "time (s)", "GiB", mem, 1, NULL, 0, why);
    if (r->ngpu == 0)
        why_absent(b, "No GPU in the monitor log: the GPU plots are left out.");
    for (int i = 0; i < r->ngpu; i++) {
        const rp_gpu *g = &r->gpu[i];
        char id[32], title[200];
        struct {
            const rp_series *s;
            const char *what, *unit;
            double scale;
        } p[] = {{&g->util, "utilization", "%", 0},
                 {&g->mem, "memory used", "GiB", 1.0 / (1 << 30)},
                 {&g->power, "power", "W", 0},
                 {&g->clock, "SM clock", "MHz", 0}};
        for (int k = 0; k < 4; k++) {
            snprintf(id, sizeof id, "gpu%d-%d", g->index, k);
            snprintf(title, sizeof title, "GPU %d %s%s%s%s", g->index, p[k].what,
                     g->nspans ? " (shaded: throttled, " : "", g->reasons,
                     g->nspans ? ")" : "");
            rp_plot_series s[] = {{p[k].s, p[k].what, false, p[k].scale, k == 0}};
            rp_plot_lines(b, id, title, "time (s)", p[k].unit, s, 1, g->spans, g->nspans, why);
        }
    }
    rp_puts(b, "</section>\n");
}

static void loader(const rp_report *r, rp_buf *b)
{
    rp_puts(b, "<section id=\"loader\"><h2>The loader</h2>\n");
    char why[700];
    run_empty(r, why, sizeof why, "wait histogram (epoch records' wait_hist)");
    if (r->hist_n > 0 && r->hist_batches > 0) {
        const char *lab[RP_HIST_MAX];
        char text[RP_HIST_MAX][48];
        double v[RP_HIST_MAX];
        bool mk[RP_HIST_MAX] = {0};
        for (int i = 0; i < r->hist_n; i++) {
            if (i + 1 < r->hist_n)
                snprintf(text[i], sizeof text[i], "%g to %g ms", r->hist_edges[i],
                         r->hist_edges[i + 1]);
            else
                snprintf(text[i], sizeof text[i], ">= %g ms", r->hist_edges[i]);
            lab[i] = text[i];
            v[i] = (double)r->hist_counts[i];
        }
        rp_plot_bars(b, "wait-hist", "Per-batch waits for data (all epochs)", "batches", lab, v,
                     mk, NULL, r->hist_n, why);
        rp_printf(b, "<p>%lld batches; p50 %.3g ms, p95 %.3g ms (last epoch), max %.3g ms.%s</p>\n",
                  (long long)r->hist_batches, r->hist_p50, r->hist_p95, r->hist_max,
                  r->hist_mismatch ? " Epochs with other buckets are not summed." : "");
    } else {
        rp_plot_bars(b, "wait-hist", "Per-batch waits for data", "batches", NULL, NULL, NULL, NULL,
                     0, why);
    }
    if (r->path[RP_MONITOR][0]) {
        char w2[700];
        stoke_say(w2, sizeof w2, "%s has no pipeline readings (a monitor of stoke train has them)",
                 r->path[RP_MONITOR]);
        rp_plot_series s[] = {{&r->wait_p95, "p95 (last 1024 batches)", false, 0, false},
                              {&r->wait_max, "max since the start", false, 0, false}};
        rp_plot_lines(b, "pipeline-wait", "The loop's wait for a batch", "time (s)", "ms", s, 2,
                      NULL, 0, w2);
    } else {
        why_absent(b, "No monitor log given: its pipeline readings would show the wait over "
                      "time.");
    }
    rp_puts(b, "</section>\n");
}

static void tuning(const rp_report *r, rp_buf *b)
{
    rp_puts(b, "<section id=\"tuning\"><h2>Tuning and bench</h2>\n");
    if (r->path[RP_TUNE][0]) {
        const char *lab[RP_MAX_TRIALS], *notes[RP_MAX_TRIALS];
        double v[RP_MAX_TRIALS];
        bool mk[RP_MAX_TRIALS];
        for (int i = 0; i < r->ntrials; i++) {
            lab[i] = r->trials[i].label;
            v[i] = r->trials[i].samples_per_s;
            mk[i] = r->trials[i].chosen;
            notes[i] = r->trials[i].error;
        }
        char why[4200];
        stoke_say(why, sizeof why, "%s has no trial", r->path[RP_TUNE]);
        rp_plot_bars(b, "tune", "stoke tune's trials", "samples/s", lab, v, mk, notes, r->ntrials,
                     why);
    } else
        why_absent(b, "No tune report given: stoke tune --json > tune.json fills the trials.");
    if (r->has_bench) {
        rp_puts(b, "<table id=\"bench\"><tr><th></th><th>naive</th><th>tuned</th></tr>\n");
        for (int i = 0; i < r->bench_nrows; i++) {
            rp_puts(b, "<tr>");
            for (int k = 0; k < 3; k++) {
                rp_puts(b, "<td>");
                rp_esc(b, r->bench_rows[i][k]);
                rp_puts(b, "</td>");
            }
            rp_puts(b, "</tr>\n");
        }
        rp_puts(b, "</table>\n");
        if (isfinite(r->speedup))
            rp_printf(b, "<p>Speedup, tuned over naive: <b>%.2fx</b></p>\n", r->speedup);
    } else
        why_absent(b, "No bench report given: stoke bench --json bench.json fills the "
                      "before/after table.");
    rp_puts(b, "</section>\n");
}

void rp_render(const rp_report *r, rp_buf *b)
{
    rp_puts(b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
               "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
               "style-src 'unsafe-inline'; img-src data:\">\n<title>stoke report");
    if (r->model[0]) {
        rp_puts(b, ": ");
        rp_esc(b, r->model);
    }
    rp_printf(b, "</title>\n<style>%s</style></head><body>\n<h1>stoke report</h1>\n", css);
    rp_puts(b, "<p class=\"inputs\">");
    for (int k = RP_RUN; k <= RP_TUNE; k++)
        if (r->path[k][0]) {
            rp_esc(b, rp_kind_name((rp_kind)k));
            rp_puts(b, ": ");
            rp_esc(b, r->path[k]);
            rp_puts(b, "<br>");
        }
    rp_printf(b, "written by stoke %s</p>\n", STOKE_VERSION);
    summary(r, b);
    findings(r, b);
    training(r, b);
    utilization(r, b);
    loader(r, b);
    tuning(r, b);
    rp_puts(b, "</body></html>\n");
}
