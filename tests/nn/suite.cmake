# std.nn against PyTorch (tests/nn/README.md).  The fixtures are committed,
# so neither test needs PyTorch to be installed:
# nn/fixture_checker proves tests/nn/check_fixtures.py passes the fixtures'
# own values and catches every kind of wrong answer (about 2 s);
# nn/fixtures_torch regenerates the fixtures and compares bytes, and runs
# torch in float32 through the checker; skipped (77) until
# bench/nn/setup.sh has made build/peers/torch (network, once).
add_test(NAME nn/fixture_checker
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/nn/check_fixtures_test.py)
add_test(NAME nn/fixtures_torch
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/nn/check_fixtures_test.py
          --torch-only --torch ${CMAKE_BINARY_DIR}/peers/torch)
set_tests_properties(nn/fixtures_torch PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
