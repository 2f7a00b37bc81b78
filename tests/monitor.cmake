# stoke monitor: unit tests of the library module and end-to-end runs of the binary.
stoke_unit_test(test_monitor test_monitor.c)
# Its waits for the sampler thread have no clock: the timeout ends a sampler that
# never samples.
set_tests_properties(test_monitor PROPERTIES TIMEOUT 300)
# The ranks of a data-parallel run: the rank rules, and the ranks of a watched tree.
stoke_unit_test(test_monitor_ranks test_monitor_ranks.c)
set_tests_properties(test_monitor_ranks PROPERTIES TIMEOUT 120)

# Each end-to-end case is one run of tests/e2e/monitor.sh; the GPU cases load the NVML
# test double with a scenario from tests/scenarios/.
set(STOKE_MONITOR_E2E_CASES exit-status signal-status no-such-command bad-pid bad-jsonl
    bad-data sigterm pid-ends jsonl-csv gpu-absent-readings gpu-input-bound gpu-busy-thread
    gpu-batch-grow gpu-diagnosis-jsonl gpu-throttle gpu-memory-full gpu-healthy mpirun-ranks)
foreach(case ${STOKE_MONITOR_E2E_CASES})
  add_test(NAME monitor_e2e_${case}
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/monitor.sh ${case}
                   $<TARGET_FILE:stoke> $<TARGET_FILE:fake_nvml>
                   ${CMAKE_CURRENT_SOURCE_DIR}/scenarios ${CMAKE_CURRENT_BINARY_DIR}/monitor-e2e)
  set_tests_properties(monitor_e2e_${case} PROPERTIES TIMEOUT 60)
endforeach()
# Skipped where OpenMPI's mpirun is not installed.
set_tests_properties(monitor_e2e_mpirun-ranks PROPERTIES SKIP_RETURN_CODE 77)
# These two keep cores busy and judge whose CPU it was: run side by side, each would
# take the other's cores.
set_tests_properties(monitor_e2e_gpu-input-bound monitor_e2e_gpu-busy-thread
                     PROPERTIES RESOURCE_LOCK monitor_cpu_burn)

# A real loader feeding a real monitor through the pipeline provider.
stoke_unit_test(test_pipeline_monitor test_pipeline_monitor.c)
set_tests_properties(test_pipeline_monitor PROPERTIES TIMEOUT 300)

# The Prometheus endpoint (docs/prometheus.md): the exposition, addresses, raw HTTP
# against the server; then curl, promtool, a real Prometheus and hostile clients
# against `stoke monitor` and `stoke train` (skipped where those tools are missing).
stoke_unit_test(test_prom test_prom.c)
foreach(case monitor train prometheus-server hostile hostile-monitor errors)
  add_test(NAME prometheus_e2e_${case}
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/prometheus.sh ${case}
                   $<TARGET_FILE:stoke> $<TARGET_FILE:fake_nvml>
                   ${CMAKE_CURRENT_SOURCE_DIR}/scenarios ${CMAKE_CURRENT_BINARY_DIR}/prometheus-e2e)
  set_tests_properties(prometheus_e2e_${case} PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77)
endforeach()
# The cases that train run the nn kernels: labelled nn as the other training tests, so
# the TSan build leaves them out (OpenMP's libgomp is not built with TSan);
# hostile-monitor puts the server under the same attack there. Label nocap: they train
# only to have something to scrape, so the capped CPUs' runs (scripts/check) skip them.
set_tests_properties(prometheus_e2e_train prometheus_e2e_hostile PROPERTIES LABELS "nn;nocap")
