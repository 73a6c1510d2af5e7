// A program written against 0.1's names still compiles, with a warning naming the new one: made
// an error here (-Werror=deprecated-declarations), the build must fail saying what it is now.
#include <epl/testing/gradcheck.hpp>

int main() { return sizeof(epl::testing::CheckContext*) > 0 ? 0 : 1; }
