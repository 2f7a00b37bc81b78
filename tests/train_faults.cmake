# Issue 26's faults in settings and checkpoints: signed unsigned values and device
# errors at the config parser; a checkpoint's metadata and config out of range or not
# an object, non-UTF-8 paths in every JSON written, and where a resumed run writes.
stoke_unit_test(test_train_faults test_train_faults.c)

add_test(NAME train_faults_e2e
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/train_faults.sh $<TARGET_FILE:stoke>
                 ${CMAKE_CURRENT_BINARY_DIR}/train-faults-e2e)
set_tests_properties(train_faults_e2e PROPERTIES LABELS nn TIMEOUT 300 SKIP_RETURN_CODE 77)
