/* parse.c - whole unsigned numbers from outside text (parse.h). */
#include "core/parse.h"

#include <errno.h>
#include <stdlib.h>

static bool is_digit(char c, int base)
{
    return (c >= '0' && c <= '9') ||
           (base == 16 && ((c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')));
}

bool stoke_parse_u64_prefix(const char *s, int base, uint64_t *out, const char **end)
{
    /* checked here, not left to strtoull: it skips blanks, takes a sign and "0x" */
    if (!s || !is_digit(s[0], base) || (base == 16 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')))
        return false;
    char *e;
    errno = 0;
    unsigned long long v = strtoull(s, &e, base);
    if (errno)
        return false;
    *out = (uint64_t)v;
    if (end)
        *end = e;
    return true;
}

bool stoke_parse_u64(const char *s, uint64_t *out)
{
    const char *end;
    uint64_t v;
    if (!stoke_parse_u64_prefix(s, 10, &v, &end) || *end)
        return false;
    *out = v;
    return true;
}
