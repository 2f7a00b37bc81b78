/* series.c - the downsampler and the text buffer of the report. A series keeps at most
 * RP_MAX_POINTS buckets whatever its length: when they fill up, neighbours merge and
 * each later bucket takes twice as many inputs, so memory stays bounded while the
 * lowest and highest value of every stretch (the spikes a plot must show) survive. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/report.h"

void rp_series_init(rp_series *s, const char *name)
{
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->width = 1;
    s->first_nonfinite_x = NAN;
}

void rp_series_free(rp_series *s)
{
    free(s->b);
    s->b = NULL;
}

static void merge_into(rp_bucket *a, const rp_bucket *b)
{
    if (b->n > 0) {
        if (a->n == 0 || b->lo.y < a->lo.y)
            a->lo = b->lo;
        if (a->n == 0 || b->hi.y > a->hi.y)
            a->hi = b->hi;
    }
    if (b->gap && !a->gap) /* the break comes after a's points, if it has any */
        a->gap_first = a->n == 0;
    a->gap = a->gap || b->gap;
    a->n += b->n;
}

/* Halves the buckets: each pair becomes one. */
static void halve(rp_bucket *b, int *nb)
{
    int k = 0;
    for (int i = 0; i < *nb; i += 2) {
        rp_bucket m = b[i];
        if (i + 1 < *nb)
            merge_into(&m, &b[i + 1]);
        b[k++] = m;
    }
    *nb = k;
}

static bool push(rp_series *s)
{
    if (!s->b) {
        s->b = calloc(RP_MAX_POINTS, sizeof *s->b);
        if (!s->b)
            return false;
    }
    if (s->nb == RP_MAX_POINTS) {
        halve(s->b, &s->nb);
        s->width *= 2;
    }
    s->b[s->nb++] = s->cur;
    memset(&s->cur, 0, sizeof s->cur);
    s->cur_in = 0;
    return true;
}

bool rp_series_add(rp_series *s, double x, double x2, double y)
{
    /* a full bucket goes in before the next value: the width may double meanwhile */
    if (s->cur_in >= s->width && !push(s))
        return false;
    s->total++;
    s->cur_in++;
    if (!isfinite(y)) {
        if (s->nonfinite++ == 0)
            s->first_nonfinite_x = x;
        if (s->cur.n == 0)
            s->cur.gap_first = true;
        s->cur.gap = true;
        return true;
    }
    s->finite++;
    rp_point p = {x, x2, y};
    if (s->cur.n == 0 || y < s->cur.lo.y)
        s->cur.lo = p;
    if (s->cur.n == 0 || y > s->cur.hi.y)
        s->cur.hi = p;
    s->cur.n++;
    return true;
}

bool rp_series_downsampled(const rp_series *s) { return s->width > 1; }

static void emit(rp_out *o, rp_point p)
{
    o->p[o->n++] = p;
    if (isfinite(p.y))
        o->points++;
}

bool rp_series_points(const rp_series *s, rp_out *o)
{
    memset(o, 0, sizeof *o);
    int nb = s->nb;
    rp_bucket *b = malloc(((size_t)nb + 1) * sizeof *b);
    if (!b)
        return false;
    if (nb)
        memcpy(b, s->b, (size_t)nb * sizeof *b);
    if (s->cur_in > 0)
        b[nb++] = s->cur;
    /* downsampled: at most RP_MAX_POINTS / 2 buckets of two points each */
    if (s->width > 1)
        while (nb > RP_MAX_POINTS / 2)
            halve(b, &nb);
    o->p = malloc(((size_t)nb * 4 + 1) * sizeof *o->p);
    if (!o->p) {
        free(b);
        return false;
    }
    rp_point brk = {NAN, NAN, NAN};
    for (int i = 0; i < nb; i++) {
        if (b[i].gap && (b[i].gap_first || b[i].n == 0))
            emit(o, brk);
        if (b[i].n > 0) {
            bool lo_first = b[i].lo.x <= b[i].hi.x;
            emit(o, lo_first ? b[i].lo : b[i].hi);
            if (b[i].n > 1 && (b[i].lo.x != b[i].hi.x || b[i].lo.y != b[i].hi.y))
                emit(o, lo_first ? b[i].hi : b[i].lo);
        }
        if (b[i].gap && !b[i].gap_first && b[i].n > 0)
            emit(o, brk);
    }
    free(b);
    return true;
}

/* ---- rows of a stacked area ---------------------------------------------------------- */

#define STACK_CAP (RP_MAX_POINTS / 2)

static void row_merge(rp_row *a, const rp_row *b)
{
    int64_t n = a->n + b->n;
    if (n == 0)
        return;
    a->x = (a->x * (double)a->n + b->x * (double)b->n) / (double)n;
    for (int i = 0; i < RP_STACK_MAX; i++)
        a->v[i] = (a->v[i] * (double)a->n + b->v[i] * (double)b->n) / (double)n;
    a->n = n;
}

bool rp_stack_add(rp_stack *s, double x, const double *v)
{
    if (!s->rows) {
        s->rows = calloc(STACK_CAP, sizeof *s->rows);
        if (!s->rows)
            return false;
        s->width = 1;
    }
    if (s->cur.n >= s->width) {
        if (s->n == STACK_CAP) {
            int k = 0;
            for (int i = 0; i < s->n; i += 2) {
                rp_row m = s->rows[i];
                if (i + 1 < s->n)
                    row_merge(&m, &s->rows[i + 1]);
                s->rows[k++] = m;
            }
            s->n = k;
            s->width *= 2;
        }
        s->rows[s->n++] = s->cur;
        memset(&s->cur, 0, sizeof s->cur);
    }
    rp_row r = {.x = x, .n = 1};
    for (int i = 0; i < RP_STACK_MAX; i++)
        r.v[i] = isfinite(v[i]) ? v[i] : 0;
    row_merge(&s->cur, &r);
    s->total++;
    return true;
}

int rp_stack_rows(const rp_stack *s, rp_row **out)
{
    *out = malloc(((size_t)s->n + 1) * sizeof **out);
    if (!*out)
        return 0;
    int n = s->n;
    if (n)
        memcpy(*out, s->rows, (size_t)n * sizeof **out);
    if (s->cur.n > 0) {
        if (n == STACK_CAP)
            row_merge(&(*out)[n - 1], &s->cur);
        else
            (*out)[n++] = s->cur;
    }
    return n;
}

void rp_stack_free(rp_stack *s)
{
    free(s->rows);
    s->rows = NULL;
}

/* ---- text -------------------------------------------------------------------------- */

static bool grow(rp_buf *b, size_t more)
{
    if (b->failed)
        return false;
    if (b->n + more + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 65536;
    while (cap < b->n + more + 1)
        cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) {
        b->failed = true;
        return false;
    }
    b->s = s;
    b->cap = cap;
    return true;
}

void rp_puts(rp_buf *b, const char *s)
{
    size_t n = strlen(s);
    if (!grow(b, n))
        return;
    memcpy(b->s + b->n, s, n + 1);
    b->n += n;
}

void rp_printf(rp_buf *b, const char *fmt, ...)
{
    va_list ap, aq;
    va_start(ap, fmt);
    va_copy(aq, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n >= 0 && grow(b, (size_t)n))
        b->n += (size_t)vsnprintf(b->s + b->n, (size_t)n + 1, fmt, aq);
    va_end(aq);
}

void rp_esc(rp_buf *b, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        switch (c) {
        case '&': rp_puts(b, "&amp;"); break;
        case '<': rp_puts(b, "&lt;"); break;
        case '>': rp_puts(b, "&gt;"); break;
        case '"': rp_puts(b, "&quot;"); break;
        case '\'': rp_puts(b, "&#39;"); break;
        default:
            if (c >= 0x20 || c == '\n' || c == '\t') {
                char t[2] = {(char)c, 0};
                rp_puts(b, t);
            }
        }
    }
}
