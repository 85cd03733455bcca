"""Set (a), input-grounded: the answer copies much of the input.

Every code file, document and text below was written for this benchmark
(no third-party text); make.py turns them into a.jsonl.
"""

CODE = {
    "inventory.py": '''def total_value(items):
    tot = 0
    for it in items:
        if it["quantity"] <= 0:
            continue
        tot += it["quantity"] * it["unit_price"]
    return tot


def low_stock(items, threshold=5):
    result = []
    for it in items:
        if it["quantity"] < threshold:
            result.append(it["name"])
    return result
''',
    "retry.js": '''function fetchWithRetry(url, attempts) {
  let n = 0;
  return new Promise((resolve, reject) => {
    const tryOnce = () => {
      fetch(url)
        .then((res) => resolve(res))
        .catch((err) => {
          n += 1;
          if (n >= attempts) {
            reject(err);
          } else {
            setTimeout(tryOnce, 200 * n);
          }
        });
    };
    tryOnce();
  });
}
''',
    "ring.c": '''#include <stddef.h>

struct ring {
    int *buf;
    size_t cap;
    size_t head;
    size_t tail;
};

int ring_push(struct ring *r, int v) {
    size_t next = (r->head + 1) % r->cap;
    if (next == r->tail)
        return -1;
    r->buf[r->head] = v;
    r->head = next;
    return 0;
}

int ring_pop(struct ring *r, int *out) {
    if (r->head == r->tail)
        return -1;
    *out = r->buf[r->tail];
    r->tail = (r->tail + 1) % r->cap;
    return 0;
}
''',
    "config_loader.py": '''import json
import os


def load_config(path):
    with open(path) as f:
        cfg = json.load(f)
    cfg.setdefault("port", 8080)
    cfg.setdefault("host", "127.0.0.1")
    if "PORT" in os.environ:
        cfg["port"] = int(os.environ["PORT"])
    return cfg
''',
    "stats.go": '''package stats

func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func Max(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs[1:] {
		if x > m {
			m = x
		}
	}
	return m
}
''',
    "user_model.py": '''class User:
    def __init__(self, name, email, age):
        self.name = name
        self.email = email
        self.age = age

    def is_adult(self):
        return self.age >= 18

    def display(self):
        return self.name + " <" + self.email + ">"
''',
    "temperature.rs": '''pub fn celsius_to_fahrenheit(c: f64) -> f64 {
    c * 9.0 / 5.0 + 32.0
}

pub fn fahrenheit_to_celsius(f: f64) -> f64 {
    (f - 32.0) * 5.0 / 9.0
}

pub fn average(readings: &[f64]) -> f64 {
    let sum: f64 = readings.iter().sum();
    sum / readings.len() as f64
}
''',
    "word_count.py": '''import sys


def count_words(text):
    counts = {}
    for word in text.split():
        w = word.lower().strip(".,!?")
        counts[w] = counts.get(w, 0) + 1
    return counts


if __name__ == "__main__":
    data = sys.stdin.read()
    for w, c in sorted(count_words(data).items()):
        print(w, c)
''',
}

CODE_TASKS = [
    ("inventory.py", "Rename the variable `tot` to `total` everywhere in this file. Return the whole file."),
    ("retry.js", "Rename the parameter `attempts` to `maxAttempts` everywhere. Return the complete function."),
    ("ring.c", "Add a one-line comment above each function saying what it returns. Return the whole file."),
    ("config_loader.py", "Add a docstring to `load_config` describing its argument and return value. Return the whole file."),
    ("stats.go", "Make `Max` return 0 for an empty slice, like `Mean` does. Return the whole file."),
    ("user_model.py", "Add type hints to every method of this class. Return the whole class."),
    ("temperature.rs", "Rename `readings` to `samples` in `average`. Return the whole file unchanged otherwise."),
    ("word_count.py", "Rename the function `count_words` to `word_frequencies` and update its call. Return the whole file."),
    ("inventory.py", "Change the default threshold of `low_stock` from 5 to 10. Return the whole file."),
    ("user_model.py", "Add a method `greeting` that returns \"Hello, \" followed by the name. Return the whole class."),
]

DOCS = {
    "invoice": '''INVOICE No. 2024-0417
Issued: 17 April 2024
Due: 17 May 2024
Seller: Blue Heron Printing Ltd, 12 Mill Lane, Harwick
Buyer: Oakfield Community Library, 3 Station Road, Harwick
Items:
  1. 500 bookmarks, full colour, 4.50 per 100 = 22.50
  2. 40 posters A2, matte, 3.20 each = 128.00
  3. Design fee, flat = 60.00
Subtotal: 210.50
VAT (20%): 42.10
Total due: 252.60
Payment: bank transfer to account 40-12-77 / 31926584, reference INV2024-0417
''',
    "job": '''Position: Junior Data Analyst
Team: Customer Insights
Location: Leeds office, two days a week on site
Salary: 28,000 to 32,000 per year
Start date: 1 September
Responsibilities: build weekly dashboards for the support team; clean survey data;
answer ad-hoc questions from product managers with short written summaries.
Requirements: SQL (joins, window functions), a spreadsheet tool, clear writing.
Nice to have: Python or R, experience with customer surveys.
Apply by: 30 June, with a CV and a one-page cover letter to careers@example.org
''',
    "bug": '''Bug 4471: Export to CSV drops the last row
Reporter: Priya Raman
Version: 3.8.2 (desktop, Windows 11)
Severity: major
Steps to reproduce:
  1. Open any project with more than 100 tasks.
  2. Choose File > Export > CSV.
  3. Open the exported file in a text editor.
Expected: one line per task plus a header line.
Actual: the last task is missing; the file ends after the second-to-last task.
Workaround: add an empty dummy task at the end before exporting.
''',
    "meeting": '''Minutes of the Garden Committee, 9 March
Present: Tom Ellis (chair), Ana Costa, Bill Moreno, Jun Sato
Apologies: Rita Okafor
1. Compost bins: Ana will order two new bins before 20 March, budget 90.
2. Spring planting day: set for Saturday 6 April, 10:00 to 14:00.
3. Water butts: Bill reported one cracked butt; Jun will ask the council for a free replacement.
4. Treasurer's note: balance stands at 412.35 after the seed order.
Next meeting: 13 April, 19:00, in the church hall.
''',
}

DOC_TASKS = [
    ("invoice", "Quote exactly the lines that give the seller, the buyer and the total due."),
    ("invoice", "List every item line of this invoice exactly as written, one per line."),
    ("job", "Extract the position, location, salary and apply-by lines, quoted exactly."),
    ("job", "Copy the Responsibilities and Requirements lines exactly as they appear."),
    ("bug", "Quote the steps to reproduce, the expected result and the actual result exactly."),
    ("bug", "Give the bug's title line, reporter, version and severity exactly as written."),
    ("meeting", "Quote each numbered item of the minutes exactly, one per line."),
    ("meeting", "Copy the lines about who was present, apologies and the next meeting exactly."),
]

TEXTS = [
    ("Rewrite this text in the past tense, changing nothing else.",
     '''Every morning Maria opens the bakery at six. She lights the ovens, sets out the
trays and starts the first batch of bread. By seven the street smells of warm
loaves, and the first customers wait at the door. Her brother arrives at eight
to serve at the counter while she keeps baking until noon.'''),
    ("Replace the name \"Daniel\" with \"Sofia\" (and he/his with she/her) and change nothing else.",
     '''Daniel packed his bag the night before the trip. He checked his tickets twice,
charged his phone and laid out his walking boots by the door. In the morning
Daniel caught the early train to the coast, where his cousin was waiting with
a map of the cliff path and a flask of tea.'''),
    ("Fix the spelling mistakes in this text and change nothing else.",
     '''The comittee recieved the proposal on Tuesday and will discus it at the next
meeting. Members are asked to read the atached document carefuly and to send
any questions to the secretery before Friday. The final desicion will be
anounced in the newsletter.'''),
    ("Convert the British spellings to American spellings and change nothing else.",
     '''The colour of the theatre's curtains was chosen to honour the centre's
founder. Our organisation has analysed the programme and will travel to the
neighbouring town to catalogue the remaining archives. Please favour the
metre-long banners when you decorate.'''),
    ("Change every date in this notice to one week later and change nothing else.",
     '''The library will close early on 3 May for staff training. The reading room
reopens on 4 May at 09:00. Books due between 3 May and 5 May may be returned
without a fine until 10 May. The children's story hour moves from 4 May to
6 May.'''),
    ("Replace every measurement in miles with kilometres (1 mile = 1.6 km) and change nothing else.",
     '''The trail starts at the car park and climbs for 2 miles to the ridge. From
there it follows the ridge for 3 miles before dropping 1 mile to the lake.
The full loop is 8 miles, and the visitor centre is half a mile from the
start.'''),
]
