"""Sets (b) open chat, (c) agent loop and (d) schema-constrained.

Written for this benchmark (no third-party text); make.py turns them into
b.jsonl, c.jsonl and d.jsonl.
"""

OPEN_CHAT = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "What are three good habits for getting better sleep?",
    "Give me some advice for my first day at a new job.",
    "Why is the sky blue? Explain it simply.",
    "Write a poem about autumn leaves.",
    "What should I pack for a weekend camping trip?",
    "How can I stay motivated when learning a new language?",
    "Tell me a bedtime story about a brave little fox.",
    "What is the difference between weather and climate?",
    "Suggest a few ideas for a rainy afternoon with kids.",
    "How do I start running if I have never exercised before?",
    "Describe your ideal weekend in a few sentences.",
    "What are some tips for cooking rice well?",
    "Write a short dialogue between a cat and a dog about breakfast.",
    "Why do people enjoy music so much?",
    "Give me three ideas for a birthday gift for my grandmother.",
    "How can I be a better listener?",
    "Write a story about a robot who wants to learn to paint.",
    "What is a good way to organise a small kitchen?",
    "Explain how plants make their food.",
    "What are some ways to save money each month?",
    "Write a short letter thanking a teacher.",
    "How do bees make honey?",
    "What makes a good friend?",
]

TOOLS = [
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file of the repository and return its text.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                       "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "search_code", "description": "Search the repository for a string; return matching lines.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                       "required": ["query"]}}},
    {"type": "function", "function": {
        "name": "edit_file", "description": "Replace old_text by new_text in a file.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "old_text": {"type": "string"}, "new_text": {"type": "string"}},
            "required": ["path", "old_text", "new_text"]}}},
    {"type": "function", "function": {
        "name": "run_tests", "description": "Run the test suite (optionally one file) and return the output.",
        "parameters": {"type": "object", "properties": {"target": {"type": "string"}}}}},
]

AGENT_SYSTEM = ("You are a coding agent working in a Python repository. Use the tools to inspect "
                "and change files. Call one tool at a time.")

# Two agent sessions; each step: (tool name, arguments, tool result). The
# user's task opens the conversation; each turn of the benchmark sends the
# conversation up to and including a tool result and asks for the next step.
AGENT_SESSIONS = [
    ("The function parse_duration in utils/timefmt.py crashes on input like '1h30m'. Fix it and make the tests pass.", [
        ("search_code", {"query": "def parse_duration"},
         "utils/timefmt.py:12:def parse_duration(text):"),
        ("read_file", {"path": "utils/timefmt.py"},
         "import re\n\nUNITS = {'h': 3600, 'm': 60, 's': 1}\n\n\n"
         "def format_duration(seconds):\n    m, s = divmod(seconds, 60)\n    return f'{m}m{s}s'\n\n\n"
         "def parse_duration(text):\n    value, unit = text[:-1], text[-1]\n    return int(value) * UNITS[unit]\n"),
        ("run_tests", {"target": "tests/test_timefmt.py"},
         "FAILED tests/test_timefmt.py::test_parse_compound - ValueError: invalid literal for int() with base 10: '1h30'\n"
         "1 failed, 4 passed"),
        ("read_file", {"path": "tests/test_timefmt.py"},
         "from utils.timefmt import parse_duration, format_duration\n\n\n"
         "def test_parse_seconds():\n    assert parse_duration('45s') == 45\n\n\n"
         "def test_parse_compound():\n    assert parse_duration('1h30m') == 5400\n"),
        ("edit_file", {"path": "utils/timefmt.py",
                       "old_text": "    value, unit = text[:-1], text[-1]\n    return int(value) * UNITS[unit]\n",
                       "new_text": "    total = 0\n    for value, unit in re.findall(r'(\\d+)([hms])', text):\n"
                                   "        total += int(value) * UNITS[unit]\n    return total\n"},
         "Edited utils/timefmt.py: 1 replacement."),
        ("run_tests", {"target": "tests/test_timefmt.py"}, "5 passed"),
        ("search_code", {"query": "parse_duration("},
         "utils/timefmt.py:12:def parse_duration(text):\ncli/main.py:40:    timeout = parse_duration(args.timeout)\n"
         "tests/test_timefmt.py:5:    assert parse_duration('45s') == 45"),
        ("read_file", {"path": "cli/main.py"},
         "import argparse\nfrom utils.timefmt import parse_duration\n\n\ndef main():\n"
         "    ap = argparse.ArgumentParser()\n    ap.add_argument('--timeout', default='30s')\n"
         "    args = ap.parse_args()\n    timeout = parse_duration(args.timeout)\n    return timeout\n"),
        ("edit_file", {"path": "cli/main.py",
                       "old_text": "    ap.add_argument('--timeout', default='30s')\n",
                       "new_text": "    ap.add_argument('--timeout', default='30s', help='e.g. 45s or 1h30m')\n"},
         "Edited cli/main.py: 1 replacement."),
        ("run_tests", {}, "12 passed"),
        ("read_file", {"path": "CHANGELOG.md"},
         "# Changelog\n\n## Unreleased\n\n- Nothing yet.\n"),
    ]),
    ("Add a --verbose flag to the report command in tools/report.py that prints each row as it is processed.", [
        ("read_file", {"path": "tools/report.py"},
         "import argparse\nimport csv\n\n\ndef build_report(path):\n    rows = []\n"
         "    with open(path) as f:\n        for row in csv.DictReader(f):\n            rows.append(row)\n"
         "    return rows\n\n\ndef main():\n    ap = argparse.ArgumentParser()\n"
         "    ap.add_argument('path')\n    args = ap.parse_args()\n    rows = build_report(args.path)\n"
         "    print(len(rows), 'rows')\n"),
        ("search_code", {"query": "build_report("},
         "tools/report.py:5:def build_report(path):\ntools/report.py:17:    rows = build_report(args.path)\n"
         "tests/test_report.py:8:    rows = build_report(sample)"),
        ("edit_file", {"path": "tools/report.py",
                       "old_text": "def build_report(path):\n",
                       "new_text": "def build_report(path, verbose=False):\n"},
         "Edited tools/report.py: 1 replacement."),
        ("edit_file", {"path": "tools/report.py",
                       "old_text": "            rows.append(row)\n",
                       "new_text": "            if verbose:\n                print(row)\n            rows.append(row)\n"},
         "Edited tools/report.py: 1 replacement."),
        ("edit_file", {"path": "tools/report.py",
                       "old_text": "    ap.add_argument('path')\n",
                       "new_text": "    ap.add_argument('path')\n    ap.add_argument('--verbose', action='store_true')\n"},
         "Edited tools/report.py: 1 replacement."),
        ("edit_file", {"path": "tools/report.py",
                       "old_text": "    rows = build_report(args.path)\n",
                       "new_text": "    rows = build_report(args.path, verbose=args.verbose)\n"},
         "Edited tools/report.py: 1 replacement."),
        ("run_tests", {"target": "tests/test_report.py"}, "3 passed"),
        ("read_file", {"path": "tests/test_report.py"},
         "from tools.report import build_report\n\n\ndef test_rows(tmp_path):\n"
         "    sample = tmp_path / 'a.csv'\n    sample.write_text('x,y\\n1,2\\n')\n"
         "    rows = build_report(sample)\n    assert len(rows) == 1\n"),
        ("edit_file", {"path": "tests/test_report.py",
                       "old_text": "    assert len(rows) == 1\n",
                       "new_text": "    assert len(rows) == 1\n\n\ndef test_verbose(tmp_path, capsys):\n"
                                   "    sample = tmp_path / 'a.csv'\n    sample.write_text('x,y\\n1,2\\n')\n"
                                   "    build_report(sample, verbose=True)\n    assert '1' in capsys.readouterr().out\n"},
         "Edited tests/test_report.py: 1 replacement."),
        ("run_tests", {"target": "tests/test_report.py"}, "4 passed"),
        ("run_tests", {}, "27 passed"),
    ]),
]

# (prompt, schema name, schema): keys are long, so a grammar that forces
# them leaves the model little to choose between the values.
SCHEMAS = [
    ("Invent a customer record for a small online bookshop.", "customer_record", {
        "customer_full_legal_name": "string", "customer_primary_email_address": "string",
        "number_of_orders_placed_this_year": "integer", "customer_has_active_loyalty_membership": "boolean"}),
    ("Describe a fictional city park.", "park_description", {
        "official_name_of_the_park": "string", "total_area_in_square_meters": "integer",
        "park_has_public_restrooms_available": "boolean", "most_popular_attraction_for_visitors": "string"}),
    ("Create a product listing for a stainless steel water bottle.", "product_listing", {
        "product_display_title_for_storefront": "string", "retail_price_in_us_dollars": "number",
        "product_capacity_in_milliliters": "integer", "product_is_dishwasher_safe_according_to_maker": "boolean"}),
    ("Summarise a made-up weather forecast for tomorrow.", "weather_forecast", {
        "forecast_location_city_name": "string", "expected_maximum_temperature_celsius": "number",
        "expected_minimum_temperature_celsius": "number", "probability_of_precipitation_percent": "integer"}),
    ("Describe a fictional employee for an HR system.", "employee_profile", {
        "employee_given_name_and_family_name": "string", "employee_department_or_team_name": "string",
        "years_of_service_with_the_company": "integer", "employee_currently_works_remotely": "boolean"}),
    ("Invent a recipe for a simple vegetable soup.", "recipe_card", {
        "recipe_title_as_shown_to_readers": "string", "total_preparation_time_in_minutes": "integer",
        "number_of_servings_the_recipe_makes": "integer", "recipe_is_suitable_for_vegetarians": "boolean"}),
    ("Describe a made-up flight booking.", "flight_booking", {
        "passenger_full_name_as_on_passport": "string", "departure_airport_three_letter_code": "string",
        "arrival_airport_three_letter_code": "string", "booking_includes_checked_luggage": "boolean"}),
    ("Create a record for a fictional library book.", "library_book", {
        "title_of_the_book_as_printed": "string", "name_of_the_primary_author": "string",
        "year_of_first_publication": "integer", "book_is_currently_available_for_loan": "boolean"}),
    ("Describe a fictional support ticket about a broken printer.", "support_ticket", {
        "short_summary_of_the_reported_problem": "string", "ticket_priority_level_from_one_to_five": "integer",
        "name_of_the_affected_device_or_service": "string", "customer_has_already_tried_restarting": "boolean"}),
    ("Invent a hotel room description.", "hotel_room", {
        "room_type_name_used_by_the_hotel": "string", "nightly_rate_in_local_currency": "number",
        "maximum_number_of_guests_allowed": "integer", "room_has_a_view_of_the_sea": "boolean"}),
    ("Describe a fictional used car for sale.", "car_listing", {
        "manufacturer_and_model_of_the_vehicle": "string", "total_kilometers_driven_so_far": "integer",
        "asking_price_in_euros": "number", "vehicle_has_full_service_history": "boolean"}),
    ("Create a profile for a fictional podcast.", "podcast_profile", {
        "name_of_the_podcast_series": "string", "main_topic_discussed_in_episodes": "string",
        "typical_episode_length_in_minutes": "integer", "new_episodes_are_released_weekly": "boolean"}),
    ("Describe a made-up restaurant reservation.", "restaurant_reservation", {
        "name_under_which_the_table_is_booked": "string", "number_of_people_in_the_party": "integer",
        "reservation_time_in_24_hour_format": "string", "guests_requested_an_outdoor_table": "boolean"}),
    ("Invent a short description of a fictional mountain hiking trail.", "hiking_trail", {
        "official_name_of_the_hiking_trail": "string", "total_trail_length_in_kilometers": "number",
        "overall_difficulty_rating_description": "string", "dogs_are_allowed_on_the_trail": "boolean"}),
    ("Create a record for a fictional museum exhibition.", "museum_exhibition", {
        "title_of_the_temporary_exhibition": "string", "name_of_the_curating_museum": "string",
        "number_of_objects_on_display": "integer", "exhibition_requires_a_separate_ticket": "boolean"}),
    ("Describe a made-up online course.", "online_course", {
        "full_title_of_the_online_course": "string", "name_of_the_lead_instructor": "string",
        "estimated_hours_needed_to_complete": "integer", "course_offers_a_completion_certificate": "boolean"}),
    ("Invent a bank transaction for a grocery purchase.", "bank_transaction", {
        "name_of_the_merchant_as_on_statement": "string", "transaction_amount_in_account_currency": "number",
        "transaction_date_in_iso_format": "string", "transaction_was_made_with_contactless_card": "boolean"}),
    ("Describe a fictional houseplant for a plant shop.", "houseplant_listing", {
        "common_name_of_the_plant_species": "string", "recommended_watering_interval_in_days": "integer",
        "plant_tolerates_low_light_conditions": "boolean", "mature_height_of_the_plant_in_centimeters": "integer"}),
    ("Create a record for a fictional sports match result.", "match_result", {
        "name_of_the_home_team": "string", "name_of_the_visiting_team": "string",
        "final_score_of_the_home_team": "integer", "final_score_of_the_visiting_team": "integer"}),
    ("Describe a made-up apartment rental listing.", "apartment_listing", {
        "street_address_of_the_apartment": "string", "monthly_rent_in_local_currency": "number",
        "number_of_bedrooms_in_the_apartment": "integer", "apartment_allows_pets_to_live_there": "boolean"}),
    ("Invent a record for a fictional conference talk.", "conference_talk", {
        "title_of_the_conference_presentation": "string", "full_name_of_the_main_speaker": "string",
        "scheduled_duration_in_minutes": "integer", "talk_will_be_recorded_for_later_viewing": "boolean"}),
]
