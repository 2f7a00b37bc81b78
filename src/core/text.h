/* text.h - formatting into fixed buffers for the reasons and messages every module
 * writes. Through a function rather than snprintf itself: a text longer than its
 * buffer is cut visibly ("..." after the last whole word that fits), never mid-word,
 * and GCC's -Wformat-truncation would otherwise flag each call. */
#ifndef STOKE_CORE_TEXT_H
#define STOKE_CORE_TEXT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

/* Formats into buf (size bytes, always NUL-terminated; nothing when buf is NULL or
 * size is 0); a text that does not fit ends in "..." at a word. */
void stoke_say(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* stoke_say with a va_list. */
void stoke_sayv(char *buf, size_t size, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* Appends to the text already in buf, cut as stoke_say cuts; nothing once cut. */
void stoke_more(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A text of known length in a fixed buffer, for whole records (a JSON line, a CSV row,
 * a Prometheus exposition): a piece that does not fit is left out entirely and `full`
 * says so, so the text never ends mid-piece and the caller can tell it is short. */
typedef struct stoke_text {
    char *buf;
    size_t size, len;
    bool full;
} stoke_text;
void stoke_text_add(stoke_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
