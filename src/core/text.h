/* text.h - formatting into fixed buffers for the reasons and messages every module
 * writes. Through a function rather than snprintf itself: the texts are cut at their
 * buffers by design, which GCC's -Wformat-truncation would otherwise flag at each
 * call. */
#ifndef STOKE_CORE_TEXT_H
#define STOKE_CORE_TEXT_H

#include <stddef.h>

/* Formats into buf (size bytes, always NUL-terminated; nothing when buf is NULL or
 * size is 0). */
void stoke_say(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Appends to the text already in buf, cut at its size. */
void stoke_more(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
