/* json.c - JSON text that is always valid UTF-8 (json.h). */
#include "core/json.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* The length of the well-formed UTF-8 sequence at s (n bytes left, n >= 1), or 0. The
 * second byte's range excludes overlong forms, surrogates and what is past U+10FFFF
 * (RFC 3629, table 3-7 of the Unicode standard). */
static size_t utf8_sequence(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c == 0xE0)
        len = 3, lo = 0xA0;
    else if (c == 0xED)
        len = 3, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF)
        len = 3;
    else if (c == 0xF0)
        len = 4, lo = 0x90;
    else if (c == 0xF4)
        len = 4, hi = 0x8F;
    else if (c >= 0xF1 && c <= 0xF3)
        len = 4;
    else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return len;
}

bool stoke_utf8_valid(const char *s)
{
    if (!s)
        return true;
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t k = utf8_sequence(p + i, n - i);
        if (!k)
            return false;
        i += k;
    }
    return true;
}

char *stoke_utf8_repair(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s), bad = 0;
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_sequence(p + i, n - i);
        bad += !k;
        i += k ? k : 1;
    }
    char *out = malloc(n + 2 * bad + 1); /* U+FFFD is 3 bytes in place of 1 */
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_sequence(p + i, n - i);
        if (k) {
            memcpy(out + o, s + i, k);
            o += k;
            i += k;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    out[o] = '\0';
    return out;
}

char *stoke_json_print(const cJSON *item, bool formatted)
{
    char *text = formatted ? cJSON_Print(item) : cJSON_PrintUnformatted(item);
    if (!text || stoke_utf8_valid(text))
        return text;
    char *fixed = stoke_utf8_repair(text);
    cJSON_free(text);
    return fixed;
}
