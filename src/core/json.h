/* json.h - JSON text that is always valid UTF-8. cJSON escapes control characters
 * but copies bytes of 0x80 and above as they are, so a path or name that is not UTF-8
 * (a directory called "caf\xe9" from a Latin-1 system, a byte 0xFF) would make the
 * whole document unreadable to every strict reader (Python's json, the safetensors
 * libraries, jq). Every JSON stoke writes - checkpoint headers, the --log records, the
 * --json outputs - is printed through stoke_json_print.
 *
 * The rule: each byte that is not part of a well-formed UTF-8 sequence (RFC 3629:
 * no overlong forms, surrogates or code points past U+10FFFF) becomes U+FFFD, the
 * replacement character. It is lossy on purpose: a lossless scheme inside JSON
 * strings (lone surrogates \udcXX, as Python's surrogateescape) is refused by cJSON
 * and serde_json, so the checkpoint would no longer load in Hugging Face's safetensors.
 * Where the exact bytes matter (a checkpoint's paths, read back by --resume and eval)
 * they are kept beside, as hex (docs/checkpoint.md, stoke.config_bytes). */
#ifndef STOKE_CORE_JSON_H
#define STOKE_CORE_JSON_H

#include <stdbool.h>
#include <stddef.h>

struct cJSON;

/* Whether the NUL-terminated s is well-formed UTF-8 (NULL: true). */
bool stoke_utf8_valid(const char *s);

/* A copy of s (malloc'd; NULL when out of memory) with every byte outside a
 * well-formed UTF-8 sequence replaced by U+FFFD. */
char *stoke_utf8_repair(const char *s);

/* cJSON_Print (formatted) or cJSON_PrintUnformatted of item, repaired as
 * stoke_utf8_repair does; malloc'd, NULL when out of memory. */
char *stoke_json_print(const struct cJSON *item, bool formatted);

#endif
