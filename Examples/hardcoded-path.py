"""Why hardcoded paths fail: the classic mistake, and the fix.

On first run the tool saves the absolute path of its notes file in its
settings, as many desktop tools do. An app's container moves when the app is
reinstalled or updated (on iOS, and here: `sandboxed-run container reinstall`),
so the saved path points nowhere. The fix is to store paths relative to the
container (or, for user folders, a bookmark) and rebuild them at every launch.

    sandboxed-run run --app com.example.paths -- /usr/bin/python3 - < Examples/hardcoded-path.py
    sandboxed-run container reinstall --app com.example.paths
    sandboxed-run run --app com.example.paths -- /usr/bin/python3 - < Examples/hardcoded-path.py
"""
import json
import os
import sys

home = os.environ["HOME"]
settings_file = os.path.join(home, "Library", "settings.json")

if not os.path.exists(settings_file):
    notes = os.path.join(home, "Documents", "notes.md")
    with open(notes, "w") as f:
        f.write("first note\n")
    with open(settings_file, "w") as f:
        # The mistake: an absolute path. The right thing: "Documents/notes.md".
        json.dump({"notes_absolute": notes, "notes_relative": "Documents/notes.md"}, f)
    print("saved settings; notes at", notes)
    sys.exit(0)

with open(settings_file) as f:
    settings = json.load(f)

absolute = settings["notes_absolute"]
if os.path.exists(absolute):
    print("the stored absolute path still works:", absolute)
else:
    print("BROKEN: the stored absolute path is gone:", absolute)
relative = os.path.join(home, settings["notes_relative"])
with open(relative) as f:
    print("FIXED: the path rebuilt from HOME works:", relative, "->", f.read().strip())
