/* test_seam.h - changing the data module's test seam (data/seam.h). Included by
 * tests/ and bench/, and by seam.c, which defines it; nothing else in src/ changes the
 * seam (docs/testing.md, "Test seams"). */
#ifndef STOKE_DATA_TEST_SEAM_H
#define STOKE_DATA_TEST_SEAM_H

#include "data/seam.h"

/* The seam, writable: a test sets a field before the work (and the threads) that
 * read it start, and puts the default back after. Not thread-safe. */
stoke_data_seam *stoke_data_test_seam(void);

#endif
