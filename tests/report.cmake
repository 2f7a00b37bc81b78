# stoke report: the downsampler and the readers (unit), then the pages as chromium
# renders them, with the hooks of train and monitor (tests/report_render.py).
stoke_unit_test(test_report test_report.c)
add_test(NAME report_render
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/report_render.py
                 $<TARGET_FILE:stoke> $<TARGET_FILE:fake_nvml> ${CMAKE_CURRENT_SOURCE_DIR}/scenarios
                 ${CMAKE_CURRENT_BINARY_DIR}/report-render)
# chromium missing: skipped with the reason, never passed. Label nn: it trains (real
# runs of stoke train), which the TSan build leaves out (scripts/check); nocap: what it
# checks is the page, not the arithmetic, so the capped CPUs' runs skip it.
set_tests_properties(report_render PROPERTIES LABELS "nn;nocap" SKIP_RETURN_CODE 77 TIMEOUT 600)
# COST: about its seconds in a release build, so `ctest -j` starts the long tests
# first and the short ones fill in beside them (ordering only; nothing is timed).
set_tests_properties(report_render PROPERTIES COST 40)
