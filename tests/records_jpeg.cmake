# Packed records that keep the JPEG bytes (version 2, `stoke data convert --store jpeg`):
# the round trip against the image folder, corrupt fields, the loader over both.
stoke_unit_test(test_records_jpeg test_records_jpeg.c)
set_tests_properties(test_records_jpeg PROPERTIES TIMEOUT 120)
