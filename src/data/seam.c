/* seam.c - the data module's test seam (seam.h), at its defaults until a test
 * changes it. */
#include "data/seam.h"

#include "data/test_seam.h"

static stoke_data_seam seam = {
    .resize_isa = -1, .transform_isa = -1, .jpeg_partial = 1, .hdf5_whole_max = -1};

const stoke_data_seam *stoke_data_seam_get(void) { return &seam; }

stoke_data_seam *stoke_data_test_seam(void) { return &seam; }
