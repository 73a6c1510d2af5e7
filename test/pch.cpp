// The source of the targets that make the tests' shared precompiled headers (CMakeLists.txt,
// epl_test): the header is what they are for, so this file adds nothing to it.
