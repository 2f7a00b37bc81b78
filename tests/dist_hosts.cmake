# Data parallel beyond one host, and the scaling model of bench/ (docs/distributed.md).

# `mpirun -np 2 stoke train` across two network namespaces joined by a veth pair (one
# rank a "host", OpenMPI's TCP held to the veth, its launch agent entering the
# namespace): the traffic crosses the interface, the log names both hosts, the weights
# equal those of the same run on one host bit for bit. Skipped (77) where namespaces
# cannot be made (not root, no CAP_NET_ADMIN, no iproute2) or OpenMPI is missing; label
# nn: it trains (the TSan build cannot see OpenMP).
add_test(NAME dist_hosts_e2e
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/dist_hosts.sh $<TARGET_FILE:stoke>
                 ${CMAKE_CURRENT_BINARY_DIR}/dist-hosts-e2e)
set_tests_properties(dist_hosts_e2e PROPERTIES LABELS nn TIMEOUT 600 SKIP_RETURN_CODE 77)

# bench/dist_model.py's arithmetic (the ring's volume, bus bandwidth, overlap) against
# hand-computed cases.
add_test(NAME dist_model_python
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/dist_model_test.py)
set_tests_properties(dist_model_python PROPERTIES LABELS python TIMEOUT 60)
