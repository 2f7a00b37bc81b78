/* tf32.c - the TF32 rule (tf32.h): the one place it is written. */
#include "core/tf32.h"

bool stoke_tf32_rule(int cc_major, int cc_minor)
{
    (void)cc_minor; /* every 8.x and later has TF32 */
    return cc_major >= 8;
}
