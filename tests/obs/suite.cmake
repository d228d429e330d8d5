# Observability (tests/obs/obs_test.py, docs/observability.md):
# --metrics-port scraped over loopback, its flags and token, --trace's
# counter tracks, TensorBoard event files against a committed one, a real
# Prometheus (Debian's prometheus) scraping a fine-tune and a sweep, and
# headless Chromium (Debian's chromium) driving --dashboard, which keeps
# build/tests/obs/dashboard.png.  One ctest per case; prometheus_* and
# dashboard exit 77 (a skip) when their program is missing,
# prometheus_train also without the model of scripts/install-models.sh.
set(OBS_CASES metrics flags token trace tfevents nothing nodes own serve gpu_emu prometheus_train
              prometheus_sweep dashboard)
foreach(c IN LISTS OBS_CASES)
  add_test(NAME obs/${c}
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/obs/obs_test.py
            --sflowc $<TARGET_FILE:sflowc> --emu $<TARGET_FILE:sflow_emu> ${c})
  set_tests_properties(obs/${c} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
endforeach()
