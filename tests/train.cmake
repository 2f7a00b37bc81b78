# The training module: checkpoints (safetensors), model files, the training loop and
# `stoke train` / `eval` / `predict`.
stoke_unit_test(test_train_checkpoint test_train_checkpoint.c)

# An independent reader (standard library + numpy) checks a checkpoint stoke wrote.
add_test(NAME train_safetensors_python
         COMMAND sh -c "$0 --fixture $1 && /usr/bin/python3 $2 fixture $1"
                 $<TARGET_FILE:test_train_checkpoint>
                 ${CMAKE_CURRENT_BINARY_DIR}/fixture.safetensors
                 ${CMAKE_CURRENT_SOURCE_DIR}/safetensors_read.py)

stoke_nn_test(test_train_model_file test_train_model_file.c)

# The loop on a small generated dataset: config precedence, learning, eval of the
# checkpoint, resume equivalence, stopping with a checkpoint, bf16 against fp32.
stoke_nn_test(test_train test_train.c)
set_tests_properties(test_train PROPERTIES TIMEOUT 120)

add_test(NAME train_e2e
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/train.sh $<TARGET_FILE:stoke>
                 ${CMAKE_CURRENT_BINARY_DIR}/train-e2e $<TARGET_FILE:stoke_seams>)
set_tests_properties(train_e2e PROPERTIES LABELS nn TIMEOUT 300 SKIP_RETURN_CODE 77)

# The records `stoke report` draws from: findings (an input-bound run) and each epoch's
# histogram of waits for batches (nocap: records, not arithmetic; scripts/check).
add_test(NAME train_log_records_e2e
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/train_log_records.sh $<TARGET_FILE:stoke>
                 ${CMAKE_CURRENT_BINARY_DIR}/train-log-records-e2e)
set_tests_properties(train_log_records_e2e PROPERTIES LABELS "nn;nocap" TIMEOUT 300 SKIP_RETURN_CODE 77)

# The actor-critic on generated bandit rollouts (numpy): A2C, PPO and behaviour cloning
# rows train a policy that picks the best action far above chance; bad rollouts fail.
add_test(NAME train_actor_critic_e2e
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/train_actor_critic.sh $<TARGET_FILE:stoke>
                 ${CMAKE_CURRENT_BINARY_DIR}/train-actor-critic-e2e)
set_tests_properties(train_actor_critic_e2e PROPERTIES LABELS nn TIMEOUT 120 SKIP_RETURN_CODE 77)

# --eval-every, --target-accuracy, --hidden and the log's start record and elapsed.
add_test(NAME train_flags_e2e
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/train_flags.sh $<TARGET_FILE:stoke>
                 ${CMAKE_CURRENT_BINARY_DIR}/train-flags-e2e)
set_tests_properties(train_flags_e2e PROPERTIES LABELS nn TIMEOUT 300 SKIP_RETURN_CODE 77)

# --recompute (gradient checkpointing): the same losses as without it, the setup line,
# --dry-run's smaller plan, the environment, and auto under a tight budget (host memory,
# and a GPU's on the CUDA test doubles).
add_test(NAME train_recompute_e2e
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/train_recompute.sh $<TARGET_FILE:stoke>
                 ${CMAKE_CURRENT_BINARY_DIR}/train-recompute-e2e ${CMAKE_CURRENT_BINARY_DIR}/fake
                 ${CMAKE_CURRENT_SOURCE_DIR}/scenarios)
set_tests_properties(train_recompute_e2e PROPERTIES LABELS nn TIMEOUT 300 SKIP_RETURN_CODE 77)
# COST: about its seconds in a release build, so `ctest -j` starts the long tests
# first and the short ones fill in beside them (ordering only; nothing is timed).
set_tests_properties(train_recompute_e2e PROPERTIES COST 40)

# batch_size auto against memory budgets (the batch found fits, one more does not),
# effective_batch, and an injected allocation failure at setup and within training.
stoke_nn_test(test_batch_fit test_batch_fit.c)
set_tests_properties(test_batch_fit PROPERTIES TIMEOUT 300)

# `stoke train --batch-size auto`: --dry-run's batch, budgets and --limit, a short run at
# it with an effective batch, and an injected allocation failure halving it.
add_test(NAME train_batch_e2e
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/train_batch.sh $<TARGET_FILE:stoke>
                 ${CMAKE_CURRENT_BINARY_DIR}/train-batch-e2e ${CMAKE_CURRENT_BINARY_DIR}/fake
                 ${CMAKE_CURRENT_SOURCE_DIR}/scenarios $<TARGET_FILE:stoke_seams>)
set_tests_properties(train_batch_e2e PROPERTIES LABELS nn TIMEOUT 300 SKIP_RETURN_CODE 77)

# Issue 24 (4): batches past the samples (validation planned at its samples, a given
# batch capped), the kernels' int range named with the batch that fits, linear layers
# on images refused at the layer, and the slow phases before training said.
add_test(NAME train_caps_e2e
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/train_caps.sh $<TARGET_FILE:stoke>
                 ${CMAKE_CURRENT_BINARY_DIR}/train-caps-e2e)
set_tests_properties(train_caps_e2e PROPERTIES LABELS nn TIMEOUT 300 SKIP_RETURN_CODE 77)

# The compute-thread controller on modelled step times: quiet, a competing job that
# comes and goes, no load readings, noise within the margin, the load's hint.
stoke_unit_test(test_train_adapt test_train_adapt.c)

# Threads on shared cores as a user sees them: adapting on/off, libgomp's bounded spin
# and the user's setting kept, the re-exec keeping arguments, a monitored foreign job
# untouched, a one-CPU cgroup quota where one can be made; label nn: it trains.
add_test(NAME train_threads_e2e
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/train_threads.sh $<TARGET_FILE:stoke>
                 ${CMAKE_CURRENT_BINARY_DIR}/train-threads-e2e)
set_tests_properties(train_threads_e2e PROPERTIES LABELS nn TIMEOUT 300 SKIP_RETURN_CODE 77)
