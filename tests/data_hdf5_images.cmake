# HDF5 files and image folders: the fixtures are written at test time by h5py and Pillow
# (Debian's python3, which has them) into the build directory, then read by stoke.
stoke_unit_test(test_data_hdf5_images test_data_hdf5_images.c)
set(STOKE_HDF5_IMAGES_FIXTURES ${CMAKE_CURRENT_BINARY_DIR}/data-hdf5-images)
add_test(NAME data_hdf5_images_fixtures
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/data/make_hdf5_images.py
                 ${STOKE_HDF5_IMAGES_FIXTURES})
set_tests_properties(data_hdf5_images_fixtures PROPERTIES FIXTURES_SETUP hdf5_images)
set_tests_properties(test_data_hdf5_images PROPERTIES FIXTURES_REQUIRED hdf5_images
                     ENVIRONMENT "STOKE_FIXTURES=${STOKE_HDF5_IMAGES_FIXTURES}" TIMEOUT 120)
