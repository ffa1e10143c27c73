// Stop strings on streamed text: nothing of a stop string is ever released, text that cannot start one is
// released at once, and the earliest stop string wins.
#include "engine/stop.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace glint {
namespace {

TEST(StopStrings, HoldsBackOnlyWhatCouldStartAStopString) {
  StopStringMatcher matcher({"</end>", "STOP"});
  EXPECT_EQ(matcher.Push("hello "), "hello ");
  EXPECT_EQ(matcher.Push("wor<"), "wor");  // "<" may start "</end>"
  EXPECT_EQ(matcher.Push("/e"), "");       // "</e" still may
  EXPECT_EQ(matcher.Push("x"), "</ex");    // no longer
  EXPECT_EQ(matcher.Push("ST"), "");
  EXPECT_EQ(matcher.Push("OP and more"), "");  // completed "STOP": nothing of it is released
  EXPECT_TRUE(matcher.stopped());
  EXPECT_EQ(matcher.Push("after"), "");
}

TEST(StopStrings, TheEarliestMatchWinsAndTextBeforeItIsReleased) {
  StopStringMatcher matcher({"bc", "abcd"});
  EXPECT_EQ(matcher.Push("xab"), "x");
  EXPECT_EQ(matcher.Push("cd"), "");  // both complete; "abcd" starts first
  EXPECT_TRUE(matcher.stopped());
  StopStringMatcher other({"cd", "abcde"});
  EXPECT_EQ(other.Push("xab"), "x");
  EXPECT_EQ(other.Push("cd"), "ab");  // "cd" is complete; "abcde" never will be
  EXPECT_TRUE(other.stopped());
}

TEST(StopStrings, StopInsideOneChunkAndFlush) {
  StopStringMatcher matcher({"##"});
  EXPECT_EQ(matcher.Push("a#b##c"), "a#b");
  EXPECT_TRUE(matcher.stopped());
  StopStringMatcher other({"##"});
  EXPECT_EQ(other.Push("tail#"), "tail");
  EXPECT_EQ(other.held_bytes(), 1u);
  EXPECT_EQ(other.Flush(), "#");  // generation ended another way: the held text was not a stop string
  StopStringMatcher none({});
  EXPECT_EQ(none.Push("anything"), "anything");
}

TEST(StopStrings, MultiByteCharactersAreNeverSplitWrongly) {
  StopStringMatcher matcher({"é!"});  // 0xC3 0xA9 '!'
  EXPECT_EQ(matcher.Push("caf\xC3\xA9"), "caf");
  EXPECT_EQ(matcher.Push("?"), "\xC3\xA9?");
}

}  // namespace
}  // namespace glint
