/* fuzz_prom.c - --prometheus's address parser on arbitrary text, and the exposition's
 * label escaping on arbitrary bytes (thread names and GPU names come from outside). The
 * input is split at its first NUL: the address before, the label value after. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "stoke/monitor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    stoke_prom_addr a;
    if (stoke_prom_parse_addr(text, &a) == STOKE_OK) {
        if (a.port < 0 || a.port > 65535 || (a.family != AF_INET && a.family != AF_INET6))
            __builtin_trap();
        char buf[80];
        stoke_prom_format_addr(&a, a.port, buf, sizeof buf);
    }
    size_t n = strlen(text);
    const char *label = n < size ? text + n + 1 : "";
    char esc[64];
    stoke_prom_escape(label, esc, sizeof esc);
    /* only whole escapes: a raw quote or newline, or a lone backslash, would break the
     * exposition */
    for (const char *p = esc; *p; p++) {
        if (*p == '\n' || *p == '"')
            __builtin_trap();
        if (*p == '\\') {
            p++;
            if (*p != '\\' && *p != '"' && *p != 'n')
                __builtin_trap();
        }
    }
    free(text);
    return 0;
}
