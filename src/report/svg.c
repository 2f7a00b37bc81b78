/* svg.c - the report's plots as inline SVG: axes with ticks and labels, a legend, and a
 * <title> on each series for a tooltip. The test contract (docs/report.md): a plot is
 * <figure class="plot" id=...> holding an <svg>; each series a <path class="series"
 * data-series=NAME data-points=N> with exactly N "x,y" points in d; a plot without data
 * is <figure class="plot empty"> with a <p class="nodata"> saying why. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/report.h"

#define W 760
#define H 300
#define ML 70
#define MR 20
#define MT 42
#define MB 46

static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                     "#8c564b", "#e377c2", "#17becf"};
#define NCOLORS 8

void rp_num(char *buf, size_t size, double v)
{
    double a = fabs(v);
    if (!isfinite(v))
        snprintf(buf, size, "%s", isnan(v) ? "NaN" : v > 0 ? "inf" : "-inf");
    else if (a >= 1e9)
        snprintf(buf, size, "%.3gG", v / 1e9);
    else if (a >= 1e6)
        snprintf(buf, size, "%.3gM", v / 1e6);
    else if (a >= 1e4)
        snprintf(buf, size, "%.3gk", v / 1e3);
    else
        snprintf(buf, size, "%.4g", v);
}

static double nice_step(double range)
{
    if (!(range > 0))
        return 1;
    double raw = range / 5, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

typedef struct axis {
    double lo, hi;
} axis;

static void widen(axis *a)
{
    if (a->lo == a->hi) {
        double d = a->lo == 0 ? 1 : fabs(a->lo) * 0.1;
        a->lo -= d;
        a->hi += d;
    }
}

static double px(const axis *a, double v) { return ML + (v - a->lo) / (a->hi - a->lo) * (W - ML - MR); }
static double py(const axis *a, double v) { return H - MB - (v - a->lo) / (a->hi - a->lo) * (H - MT - MB); }

static void frame(rp_buf *b, const char *id, const char *title, const char *xlabel,
                  const char *ylabel, const axis *x, const axis *y)
{
    rp_puts(b, "<figure class=\"plot\" id=\"");
    rp_esc(b, id);
    rp_printf(b, "\"><svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %d %d\" width=\"%d\" "
                 "height=\"%d\" role=\"img\"><title>",
              W, H, W, H);
    rp_esc(b, title);
    rp_printf(b, "</title><text class=\"title\" x=\"%d\" y=\"18\">", ML);
    rp_esc(b, title);
    rp_puts(b, "</text>");
    rp_printf(b, "<rect class=\"frame\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\"/>", ML, MT,
              W - ML - MR, H - MT - MB);
    char t[32];
    /* ticks by count, not by adding: at 1e17 adding a step of 2 changes nothing */
    double s = nice_step(x->hi - x->lo), v0 = ceil(x->lo / s) * s;
    for (int k = 0; k < 12 && v0 + k * s <= x->hi + s * 1e-9; k++) {
        double v = v0 + k * s;
        rp_num(t, sizeof t, fabs(v) < s * 1e-9 ? 0 : v);
        rp_printf(b, "<line class=\"tick\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>"
                     "<text class=\"xt\" x=\"%.1f\" y=\"%d\">%s</text>",
                  px(x, v), H - MB, px(x, v), H - MB + 5, px(x, v), H - MB + 18, t);
    }
    s = nice_step(y->hi - y->lo);
    v0 = ceil(y->lo / s) * s;
    for (int k = 0; k < 12 && v0 + k * s <= y->hi + s * 1e-9; k++) {
        double v = v0 + k * s;
        rp_num(t, sizeof t, fabs(v) < s * 1e-9 ? 0 : v);
        rp_printf(b, "<line class=\"grid\" x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>"
                     "<text class=\"yt\" x=\"%d\" y=\"%.1f\">%s</text>",
                  ML, py(y, v), W - MR, py(y, v), ML - 6, py(y, v) + 4, t);
    }
    rp_printf(b, "<text class=\"xl\" x=\"%d\" y=\"%d\">", (W + ML - MR) / 2, H - 8);
    rp_esc(b, xlabel);
    rp_printf(b, "</text><text class=\"yl\" transform=\"translate(14 %d) rotate(-90)\">",
              (H + MT - MB) / 2);
    rp_esc(b, ylabel);
    rp_puts(b, "</text>");
}

static void legend(rp_buf *b, int i, const char *label)
{
    int lx = W - MR - 170 * (i / 3 + 1), ly = 8 + 11 * (i % 3);
    rp_printf(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"/>"
                 "<text class=\"lg\" x=\"%d\" y=\"%d\">",
              lx, ly, lx + 16, ly, colors[i % NCOLORS], lx + 20, ly + 4);
    rp_esc(b, label);
    rp_puts(b, "</text>");
}

static void empty(rp_buf *b, const char *id, const char *title, const char *why)
{
    rp_puts(b, "<figure class=\"plot empty\" id=\"");
    rp_esc(b, id);
    rp_puts(b, "\"><p class=\"nodata\">");
    rp_esc(b, title);
    rp_puts(b, ": ");
    rp_esc(b, why);
    rp_puts(b, "</p></figure>\n");
}

void rp_plot_lines(rp_buf *b, const char *id, const char *title, const char *xlabel,
                   const char *ylabel, const rp_plot_series *ps, int n, const rp_span *spans,
                   int nspans, const char *empty_why)
{
    rp_out *o = calloc((size_t)n + 1, sizeof *o);
    axis x = {INFINITY, -INFINITY}, y = {INFINITY, -INFINITY};
    int drawn = 0;
    for (int i = 0; o && i < n; i++) {
        if (!rp_series_points(ps[i].s, &o[i]))
            continue;
        double sc = ps[i].scale ? ps[i].scale : 1;
        for (int k = 0; k < o[i].n; k++) {
            rp_point *p = &o[i].p[k];
            if (ps[i].use_x2)
                p->x = p->x2;
            p->y *= sc;
            if (!isfinite(p->y) || !isfinite(p->x))
                continue;
            x.lo = fmin(x.lo, p->x), x.hi = fmax(x.hi, p->x);
            y.lo = fmin(y.lo, p->y), y.hi = fmax(y.hi, p->y);
        }
        /* what is drawn: points finite on both axes (a record without the abscissa
         * breaks the line like a NaN) */
        o[i].points = 0;
        for (int k = 0; k < o[i].n; k++) {
            rp_point *p = &o[i].p[k];
            if (!isfinite(p->x))
                p->y = NAN;
            o[i].points += isfinite(p->y);
        }
        drawn += o[i].points > 0;
    }
    if (!drawn) {
        empty(b, id, title, empty_why);
        for (int i = 0; o && i < n; i++)
            free(o[i].p);
        free(o);
        return;
    }
    widen(&x);
    if (ps[0].pct) { /* a share reads against its whole: 0..100, wider only if it is */
        y.lo = fmin(y.lo, 0);
        y.hi = fmax(y.hi, 100);
    }
    if (y.lo > 0 && y.lo < y.hi * 0.5)
        y.lo = 0; /* a positive series from zero when that costs little of the height */
    widen(&y);
    double pad = ps[0].pct ? 0 : (y.hi - y.lo) * 0.05; /* the extremes off the frame's edges */
    y.hi += pad;
    if (y.lo != 0)
        y.lo -= pad;
    frame(b, id, title, xlabel, ylabel, &x, &y);
    for (int i = 0; i < nspans; i++) {
        double a = fmax(spans[i].t0, x.lo), z = fmin(fmax(spans[i].t1, spans[i].t0), x.hi);
        if (z >= a)
            rp_printf(b, "<rect class=\"throttle\" x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\">"
                         "<title>throttled %.1f s to %.1f s</title></rect>",
                      px(&x, a), MT, fmax(px(&x, z) - px(&x, a), 1.5), H - MT - MB, spans[i].t0,
                      spans[i].t1);
    }
    rp_buf notes = {0};
    for (int i = 0; i < n; i++) {
        const char *c = colors[i % NCOLORS];
        legend(b, i, ps[i].label);
        if (o[i].points == 0) {
            rp_printf(&notes, "<p class=\"note\">%s: no values</p>", ps[i].s->name);
            continue;
        }
        rp_printf(b, "<path class=\"series\" data-series=\"%s\" data-points=\"%d\" stroke=\"%s\" d=\"",
                  ps[i].s->name, o[i].points, c);
        bool pen = false;
        double lo = INFINITY, hi = -INFINITY;
        for (int k = 0; k < o[i].n; k++) {
            rp_point p = o[i].p[k];
            if (!isfinite(p.y) || !isfinite(p.x)) {
                pen = false;
                continue;
            }
            lo = fmin(lo, p.y), hi = fmax(hi, p.y);
            rp_printf(b, "%s%.1f,%.1f", pen ? " L" : " M", px(&x, p.x), py(&y, p.y));
            pen = true;
        }
        char a[32], z[32];
        rp_num(a, sizeof a, lo);
        rp_num(z, sizeof z, hi);
        rp_puts(b, "\"><title>");
        rp_esc(b, ps[i].label);
        rp_printf(b, ": %d points, %s to %s</title></path>", o[i].points, a, z);
        if (o[i].points == 1) { /* one point: a marker and its value */
            rp_point p = {0};
            for (int k = 0; k < o[i].n; k++)
                if (isfinite(o[i].p[k].y))
                    p = o[i].p[k];
            rp_printf(b, "<circle class=\"marker\" cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"/>"
                         "<text class=\"val\" x=\"%.1f\" y=\"%.1f\">%s</text>",
                      px(&x, p.x), py(&y, p.y), c, px(&x, p.x) + 7, py(&y, p.y) - 7, a);
            rp_puts(&notes, "<p class=\"note\">");
            rp_esc(&notes, ps[i].label);
            rp_printf(&notes, ": one point, %s at %s %g</p>", a, xlabel, p.x);
        }
        const rp_series *s = ps[i].s;
        if (s->nonfinite > 0) {
            rp_puts(&notes, "<p class=\"note nan\">");
            rp_esc(&notes, ps[i].label);
            rp_printf(&notes, ": %lld of %lld %s are NaN, the first at %s %g</p>",
                      (long long)s->nonfinite, (long long)s->total,
                      strstr(s->name, "loss") ? "losses" : "values", xlabel, s->first_nonfinite_x);
        }
        if (rp_series_downsampled(s)) {
            rp_puts(&notes, "<p class=\"note ds\">");
            rp_esc(&notes, ps[i].label);
            rp_printf(&notes, ": downsampled to %d of %lld points (the lowest and highest of each "
                              "stretch kept)</p>",
                      o[i].points, (long long)s->finite);
        }
    }
    rp_puts(b, "</svg>");
    if (notes.n)
        rp_puts(b, notes.s);
    rp_puts(b, "</figure>\n");
    free(notes.s);
    for (int i = 0; i < n; i++)
        free(o[i].p);
    free(o);
}

void rp_plot_stack(rp_buf *b, const char *id, const char *title, const rp_stack *st,
                   const char *const *names, const char *const *labels, int n,
                   const char *empty_why)
{
    rp_row *r;
    int m = rp_stack_rows(st, &r);
    if (m < 2) {
        empty(b, id, title, m == 1 ? "one record: a breakdown over time needs two" : empty_why);
        free(r);
        return;
    }
    double *base = calloc((size_t)m, sizeof *base);
    if (!base) {
        free(r);
        return;
    }
    axis x = {r[0].x, r[m - 1].x}, y = {0, 100};
    for (int k = 0; k < m; k++) {
        double s = 0;
        for (int i = 0; i < n; i++)
            s += r[k].v[i];
        y.hi = fmax(y.hi, s);
    }
    widen(&x);
    frame(b, id, title, "step", "% of the epoch's time so far", &x, &y);
    for (int i = 0; i < n; i++) {
        legend(b, i, labels[i]);
        rp_printf(b, "<path class=\"series band\" data-series=\"%s\" data-points=\"%d\" "
                     "fill=\"%s\" d=\"",
                  names[i], 2 * m, colors[i % NCOLORS]);
        for (int k = 0; k < m; k++)
            rp_printf(b, "%s%.1f,%.1f", k ? " L" : "M", px(&x, r[k].x), py(&y, base[k] + r[k].v[i]));
        for (int k = m - 1; k >= 0; k--)
            rp_printf(b, " L%.1f,%.1f", px(&x, r[k].x), py(&y, base[k]));
        rp_puts(b, " Z\"><title>");
        rp_esc(b, labels[i]);
        rp_puts(b, "</title></path>");
        for (int k = 0; k < m; k++)
            base[k] += r[k].v[i];
    }
    rp_puts(b, "</svg>");
    if (st->width > 1)
        rp_printf(b, "<p class=\"note ds\">downsampled to %d of %lld records (the mean of each "
                     "stretch)</p>",
                  m, (long long)st->total);
    rp_puts(b, "</figure>\n");
    free(base);
    free(r);
}

void rp_plot_bars(rp_buf *b, const char *id, const char *title, const char *xlabel,
                  const char *const *labels, const double *values, const bool *marked,
                  const char *const *notes, int n, const char *empty_why)
{
    if (n == 0) {
        empty(b, id, title, empty_why);
        return;
    }
    double hi = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(values[i]))
            hi = fmax(hi, values[i]);
    int rowh = 22, h = MT + rowh * n + 40, lw = 400, bw = W - lw - 100;
    rp_puts(b, "<figure class=\"plot\" id=\"");
    rp_esc(b, id);
    rp_printf(b, "\"><svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %d %d\" width=\"%d\" "
                 "height=\"%d\" role=\"img\"><title>",
              W, h, W, h);
    rp_esc(b, title);
    rp_puts(b, "</title><text class=\"title\" x=\"10\" y=\"18\">");
    rp_esc(b, title);
    rp_puts(b, "</text>");
    for (int i = 0; i < n; i++) {
        int y0 = MT + rowh * i;
        rp_printf(b, "<text class=\"bl\" x=\"%d\" y=\"%d\">", lw - 6, y0 + 15);
        rp_esc(b, labels[i]);
        rp_puts(b, "</text>");
        if (!isfinite(values[i])) {
            rp_printf(b, "<text class=\"failed\" x=\"%d\" y=\"%d\">failed: ", lw + 4, y0 + 15);
            rp_esc(b, notes[i] ? notes[i] : "");
            rp_puts(b, "</text>");
            continue;
        }
        double w = hi > 0 ? values[i] / hi * bw : 0;
        char v[32];
        rp_num(v, sizeof v, values[i]);
        rp_printf(b, "<rect class=\"bar%s\" x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\">"
                     "<title>%s</title></rect><text class=\"bv\" x=\"%.1f\" y=\"%d\">%s%s</text>",
                  marked[i] ? " chosen" : "", lw, y0 + 3, fmax(w, 1), rowh - 6, v, lw + w + 4,
                  y0 + 15, v, marked[i] ? " (chosen)" : "");
    }
    rp_printf(b, "<text class=\"xl\" x=\"%d\" y=\"%d\">", lw + bw / 2, h - 10);
    rp_esc(b, xlabel);
    rp_puts(b, "</text></svg></figure>\n");
}
