// Compiled only to build the precompiled header shared by the test suites.
