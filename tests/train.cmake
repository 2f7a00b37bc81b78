# The training module: checkpoints (safetensors), model files, the training loop and
# `stoke train` / `eval` / `predict`.
stoke_unit_test(test_train_checkpoint test_train_checkpoint.c)

# An independent reader (standard library + numpy) checks a checkpoint stoke wrote.
add_test(NAME train_safetensors_python
         COMMAND sh -c "$0 --fixture $1 && /usr/bin/python3 $2 fixture $1"
                 $<TARGET_FILE:test_train_checkpoint>
                 ${CMAKE_CURRENT_BINARY_DIR}/fixture.safetensors
                 ${CMAKE_CURRENT_SOURCE_DIR}/safetensors_read.py)
