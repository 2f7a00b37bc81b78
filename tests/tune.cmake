# The recommendation rules and the peak FLOP/s arithmetic, on machines built in C.
stoke_unit_test(test_tune test_tune.c)
# The hardware profile file: the built-in table's numbers and every refusal.
stoke_unit_test(test_profiles test_profiles.c)
# The measured search against a modelled loader and step whose knees are known.
stoke_unit_test(test_tune_search test_tune_search.c)
