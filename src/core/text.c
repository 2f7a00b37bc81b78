/* text.c - formatting into fixed buffers (text.h). */
#include "core/text.h"

#include <stdio.h>
#include <string.h>

#define CUT_MARK "..."

/* A text cut mid-word reads as a different word ("roun)"): a cut one ends at the last
 * whole word that leaves room for the mark, so the reader sees that something is
 * missing. Only the part from `from` (what this call wrote) is backed over. */
static void mark_cut(char *buf, size_t size, size_t from)
{
    size_t mark = sizeof CUT_MARK - 1;
    if (size < mark + 1)
        return;
    size_t end = size - 1 - mark; /* where the mark starts at the latest */
    size_t at = end;
    while (at > from && buf[at] != ' ')
        at--;
    if (at > from) /* keep the punctuation that closed the last whole word */
        end = at;
    memcpy(buf + end, CUT_MARK, mark + 1);
}

void stoke_sayv(char *buf, size_t size, const char *fmt, va_list ap)
{
    if (!buf || size == 0)
        return;
    int n = vsnprintf(buf, size, fmt, ap);
    if (n >= 0 && (size_t)n >= size)
        mark_cut(buf, size, 0);
}

void stoke_say(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    stoke_sayv(buf, size, fmt, ap);
    va_end(ap);
}

void stoke_more(char *buf, size_t size, const char *fmt, ...)
{
    size_t used = strlen(buf);
    /* a text already cut stays cut: what follows would read as if nothing were missing */
    if (used + 1 >= size ||
        (used >= sizeof CUT_MARK - 1 && !strcmp(buf + used - (sizeof CUT_MARK - 1), CUT_MARK)))
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + used, size - used, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n >= size - used)
        mark_cut(buf, size, used);
}

void stoke_text_add(stoke_text *t, const char *fmt, ...)
{
    if (t->full)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, t->size - t->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= t->size - t->len) {
        t->full = true;
        t->buf[t->len] = '\0'; /* the piece that did not fit is not there at all */
        return;
    }
    t->len += (size_t)n;
}
