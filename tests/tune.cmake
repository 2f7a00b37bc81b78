# The recommendation rules and the peak FLOP/s arithmetic, on machines built in C; the
# measured search against a modelled loader and step whose knees are known.
stoke_unit_test(test_tune test_tune.c)
stoke_unit_test(test_tune_search test_tune_search.c)
