/* text.c - formatting into fixed buffers (text.h). */
#include "core/text.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void stoke_say(char *buf, size_t size, const char *fmt, ...)
{
    if (!buf || size == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, size, fmt, ap);
    va_end(ap);
}

void stoke_more(char *buf, size_t size, const char *fmt, ...)
{
    size_t used = strlen(buf);
    if (used + 1 >= size)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, size - used, fmt, ap);
    va_end(ap);
}
