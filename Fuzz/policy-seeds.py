#!/usr/bin/env python3
"""Writes seeds for the policy fuzzer: the shipped policies in their three
forms, a macOS .entitlements file, and hostile inputs.

  Fuzz/policy-seeds.py DIR          the small seeds (committed in Fuzz/PolicyCorpus)
  Fuzz/policy-seeds.py --large DIR  the large ones (Fuzz/run.sh makes them per run)
"""
import json, os, plistlib, struct, sys

here = os.path.dirname(os.path.abspath(__file__))
policies = os.path.join(here, "..", "Policies")


def bplist(objects, top=0, ref_size=1, offset_size=1):
    """A bplist00 from encoded objects (bytes), in order, with a correct table."""
    body, offsets = b"bplist00", []
    for encoded in objects:
        offsets.append(len(body))
        body += encoded
    table = len(body)
    for offset in offsets:
        body += offset.to_bytes(offset_size, "big")
    return body + struct.pack(">6xBBQQQ", offset_size, ref_size, len(objects), top, table)


def ascii_string(text):
    assert len(text) < 15
    return bytes([0x50 | len(text)]) + text.encode()


def small(out):
    for name in ("writer", "read-only", "networked", "developer"):
        raw = open(os.path.join(policies, name + ".plist"), "rb").read()
        value = plistlib.loads(raw)
        open(os.path.join(out, name + ".plist"), "wb").write(raw)
        open(os.path.join(out, name + ".bplist"), "wb").write(plistlib.dumps(value, fmt=plistlib.FMT_BINARY))
        open(os.path.join(out, name + ".json"), "w").write(json.dumps(value, indent=2))
    entitlements = {
        "com.apple.security.app-sandbox": True,
        "com.apple.security.files.user-selected.read-only": True,
        "com.apple.security.network.client": True,
        "com.apple.security.application-groups": ["TEAM.group.one", "TEAM.group.two"],
        "com.apple.developer.icloud-container-identifiers": [],
        "com.apple.developer.associated-domains": ["applinks:example.com"],
        "com.apple.developer.ubiquity-kvstore-identifier": "TEAM.com.example.app",
        "com.apple.security.temporary-exception.files.absolute-path.read-only": ["/Library/Example/"],
        "com.apple.developer.nfc.readersession.formats": {"tags": ["NDEF", "TAG"], "nested": [{"x": 1.5, "when": 0}]},
    }
    open(os.path.join(out, "app.entitlements"), "wb").write(plistlib.dumps(entitlements))
    # An array that contains itself: 83 bytes that kept Foundation busy for minutes.
    key = "com.apple.security.device.camera"
    self_ref = bplist([bytes([0xD1, 1, 2]), bytes([0x5F, 0x10, len(key)]) + key.encode(), bytes([0xA1, 2])])
    assert len(self_ref) == 83, len(self_ref)
    open(os.path.join(out, "self-reference.bplist"), "wb").write(self_ref)
    # 31 arrays, each holding the next one twice: 2^31 values once expanded.
    levels = 31
    objects = [bytes([0xD1, 1, 2]), ascii_string("com.x")]
    for level in range(levels):
        child = 3 + level if level + 1 < levels else 2 + levels
        objects.append(bytes([0xA2, child, child]))
    objects.append(b"\x09")
    open(os.path.join(out, "shared-references.bplist"), "wb").write(bplist(objects))
    # 200 entries of the offset table point at one array of 200 references:
    # each entry is another object to decode, over the same bytes.
    count = 200
    shared = bytes([0xAF, 0x10, count]) + bytes([3] * count)
    objects = [bytes([0xD1, 1, 2]), ascii_string("com.x"), bytes([0xAF, 0x10, count]) + bytes(range(4, 4 + count)), b"\x09"]
    body = b"bplist00" + b"".join(objects)
    offsets = [8]
    for encoded in objects[:-1]:
        offsets.append(offsets[-1] + len(encoded))
    offsets += [len(body)] * count
    body += shared
    table = len(body)
    body += bytes(offsets) if max(offsets) < 256 else b"".join(o.to_bytes(2, "big") for o in offsets)
    size = 1 if max(offsets) < 256 else 2
    body += struct.pack(">6xBBQQQ", size, 2 if len(offsets) > 255 else 1, len(offsets), 0, table)
    open(os.path.join(out, "overlapping-objects.bplist"), "wb").write(body)
    # An array claiming 2^62 elements, and a trailer claiming objects past the end.
    open(os.path.join(out, "huge-count.bplist"), "wb").write(
        bplist([bytes([0xD1, 1, 2]), ascii_string("com.x"), bytes([0xAF, 0x13]) + (1 << 62).to_bytes(8, "big")]))
    bad_trailer = bytearray(plistlib.dumps({"a": [1, 2]}, fmt=plistlib.FMT_BINARY))
    bad_trailer[-8:] = (2**64 - 5).to_bytes(8, "big")
    open(os.path.join(out, "offset-table-outside.bplist"), "wb").write(bytes(bad_trailer))
    open(os.path.join(out, "deep-json-64.json"), "w").write('{"a":' + "[" * 63 + "]" * 63 + "}")
    doctype = '<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">'
    open(os.path.join(out, "entities.plist"), "w").write(
        '<?xml version="1.0"?>' + doctype + '<plist><dict><!-- c --><key>com.x</key>'
        '<string><![CDATA[<a>]]>&amp;&lt;&gt;&quot;&apos;&#65;&#x1F600;</string>'
        '<key>com.y</key><array><integer>-0x10</integer><real>1.5</real><date>2020-01-01T00:00:00Z</date>'
        '<data>AAEC</data><false/><string/><array/><dict/></array></dict></plist>')


    # Constructs Apple's reader and an XML parser read differently (all refused):
    # each a seed, so the fuzzer starts next to the edge.
    header = '<?xml version="1.0" encoding="UTF-8"?>\n'
    body = '<plist><dict><key>com.apple.security.network.client</key><true/></dict></plist>'
    divergent = {
        "doctype-literal": header + '<!DOCTYPE plist SYSTEM "x><plist><dict><key>a</key><true/></dict></plist><!--">' + body + '-->',
        "doctype-subset": header + '<!DOCTYPE plist [<!ENTITY e "x">]>' + body,
        "comment-short": header + '<plist><dict><!--><key>b</key><true/><!-- --><key>a</key><true/></dict></plist>',
        "pi-short": header + '<?><plist><dict><key>b</key><true/></dict></plist><?x?>' + body,
        "attribute-gt": header + '<plist><dict><key>a</key><string x=">y">z</string></dict></plist>',
        "null": header + '<plist><dict><key>a</key><string>$null</string><key>$null</key><true/></dict></plist>',
        "cfuid": header + '<plist><dict><key>a</key><dict><key>CF$UID</key><integer>1</integer></dict></dict></plist>',
        "latin1": '<?xml version="1.0" encoding="ISO-8859-1"?><plist><dict><key>a</key><string>\u00c3\u00a9</string></dict></plist>',
        "empty-key": header + '<plist><dict><key/>com.apple.security.network.client</key><true/></dict></plist>',
        "real-forms": header + '<plist><dict><key>a</key><array><real>0x10</real><real> 5</real><real>1.</real>'
                      '<real>.5e1</real><real>nan</real></array></dict></plist>',
    }
    for name, text in divergent.items():
        open(os.path.join(out, name + ".plist"), "w", encoding="utf-8").write(text)
    open(os.path.join(out, "negative-16-byte.bplist"), "wb").write(
        bplist([bytes([0xD1, 1, 2]), ascii_string("a"), b"\x14" + b"\xff" * 16]))
    open(os.path.join(out, "null.bplist"), "wb").write(bplist([bytes([0xD1, 1, 2]), ascii_string("a"), ascii_string("$null")]))


def large(out):
    header = '<?xml version="1.0" encoding="UTF-8"?>\n<plist version="1.0">\n<dict><key>a</key>'
    for depth in (2_000, 10_000):  # 10,000 crashed Foundation's decoder; 2,000 took it a minute
        open(os.path.join(out, f"nested-{depth}.plist"), "w").write(
            header + "<array>" * depth + "</array>" * depth + "</dict></plist>\n")
    open(os.path.join(out, "nested-10000.json"), "w").write('{"a":' + "[" * 10_000 + "]" * 10_000 + "}")


if __name__ == "__main__":
    if sys.argv[1] == "--large":
        large(sys.argv[2])
    else:
        small(sys.argv[1])
