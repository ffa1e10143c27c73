#include "modelgen/tiny_corpus.h"

namespace glint {

std::string_view TinyTokenizerCorpus() {
  static constexpr std::string_view kCorpus = R"corpus(The Keeper of the Small Light

On the northern edge of the bay there is a lighthouse that nobody needs any more. The ships that pass it carry
their own maps, and the maps know every rock. Still, every evening at a quarter past six, Mara climbs the one
hundred and twelve steps, winds the clock that turns the lens, and lights the lamp. She has done it for 9,125
nights, which is twenty-five years, give or take a leap day.

People ask her why. She tells them that a light is a promise, and a promise you keep only when it is useful is
not a promise at all. Then she laughs, because she knows it sounds grand, and she isn't a grand person. She's
a careful one. She writes down the wind, the temperature, the height of the tide and the time the lamp was lit,
in a notebook with a green cover. The entries look like this:

  2024-03-17  18:15  wind NW 12 kn  temp 6.5 C  tide 1.8 m  lamp lit
  2024-03-18  18:16  wind N 20 kn   temp 4.0 C  tide 2.1 m  lamp lit, rain

When the notebook is full she starts another one. There are forty-one of them on the shelf by the stove.

A model that reads text does something similar, in its own way. It does not see letters. It sees tokens: short
pieces of text, each with a number. The word "the" might be one token; the word "lighthouse" might be two, such
as "light" and "house"; a rare name might be five or six. The pieces are chosen by counting. Start with single
bytes, find the pair that appears most often, join it into a new piece, and repeat until the list is as long as
you want. That is byte pair encoding. It never fails, because any text is made of bytes, and every byte is on
the list from the start.

Numbers are split into groups of at most three digits, so 1234567 becomes 123, 456 and 7. Spaces usually stick
to the word that follows them, so " house" and "house" are different pieces. Contractions like it's, don't,
we're, they've, I'm, you'll and she'd keep their apostrophe with the ending. New lines are pieces of their own.

Mara would like that. She likes things that are counted and written down. "If you can't count it," she says,
"you can at least write down that you tried." Her brother, who repairs engines in the town, says the same thing
about fuel and oil. He keeps a ledger too: 3 liters here, 15 there, 0.25 of a liter for the little outboard
that never runs right. Together they could fill a library with numbers that nobody reads.

But somebody does read them. Once a year a student from the university comes to copy the notebooks. She is
measuring how the sea has changed: the average height of the tide has risen by about 3.2 millimeters a year,
and the spring storms arrive eleven days earlier than they did in 1990. "Your notebooks are the longest record
we have from this coast," she told Mara. "Nobody else wrote it down every day."

Mara did not know what to say to that, so she made tea. The kettle is old and it whistles in two notes, like a
question and an answer. They drank the tea and watched the light go round: one flash every five seconds, white,
visible for eighteen nautical miles on a clear night, which is how the old chart describes it.

Here is a small program the student wrote to read the notebooks:

  def read_entries(path):
      entries = []
      for line in open(path):
          date, time, *rest = line.split()
          entries.append({"date": date, "time": time, "notes": " ".join(rest)})
      return entries

  if __name__ == "__main__":
      print(len(read_entries("notebook_41.txt")))

It is not a clever program, and that is its virtue. It does one thing, it does it the same way every time, and
when it is wrong, it is easy to see why. Most good tools are like that: a lamp, a clock, a ledger, a kettle.

Visitors sometimes leave notes in the guest book. Some are in other languages. A family from Lyon wrote "merci
pour la lumière". A man from Kyoto wrote "ありがとう" and drew a small lighthouse. A girl from Berlin wrote
"Danke! Schön hier." Someone wrote in Chinese: "灯塔很美。" Mara cannot read all of them, but she keeps them, the
way she keeps everything.

In winter the nights are long, and the lamp burns for sixteen hours. In summer it burns for seven. Over a year it
adds up to about 4,200 hours, or 175 days of light, almost half the year. She has worked it out on the back of
a notebook, with the sums carefully checked: 16 + 7 = 23, 23 / 2 = 11.5, 11.5 * 365 = 4,197.5. "Close enough,"
she wrote underneath, "for a lighthouse."

When she is asked what will happen when she stops, she says that someone else will climb the steps, or nobody
will, and either way the sea will go on doing what it does. Then she goes up to light the lamp, because it is a
quarter past six, and that is what a quarter past six is for.
)corpus";
  return kCorpus;
}

}  // namespace glint
