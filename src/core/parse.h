/* parse.h - whole unsigned numbers from text a user, a file or a checkpoint gave.
 * strtoull alone takes leading blanks and a sign and negates: " -5" would become
 * 18446744073709551611. Every unsigned parse of outside text goes through here, so
 * each refuses such a value the same way. */
#ifndef STOKE_CORE_PARSE_H
#define STOKE_CORE_PARSE_H

#include <stdbool.h>
#include <stdint.h>

/* The digits at the start of s in `base` (10 or 16) into *out; *end (may be NULL)
 * just past them. False (nothing stored) when s does not start with a digit of the
 * base (a blank, '+', '-', "0x" are not digits) or the value exceeds UINT64_MAX. What
 * follows the digits is the caller's (a unit, a separator). */
bool stoke_parse_u64_prefix(const char *s, int base, uint64_t *out, const char **end);

/* The whole of s as a decimal number in [0, UINT64_MAX]: digits only, nothing before
 * or after them. */
bool stoke_parse_u64(const char *s, uint64_t *out);

#endif
