# stoke report: the downsampler and the readers (unit), then the pages as chromium
# renders them, with the hooks of train and monitor (tests/report_render.py).
stoke_unit_test(test_report test_report.c)
add_test(NAME report_render
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/report_render.py
                 $<TARGET_FILE:stoke> $<TARGET_FILE:fake_nvml> ${CMAKE_CURRENT_SOURCE_DIR}/scenarios
                 ${CMAKE_CURRENT_BINARY_DIR}/report-render)
# chromium missing: skipped with the reason, never passed. Label nn: it trains (real
# runs of stoke train), which the TSan build leaves out (scripts/check).
set_tests_properties(report_render PROPERTIES LABELS nn SKIP_RETURN_CODE 77 TIMEOUT 600)
