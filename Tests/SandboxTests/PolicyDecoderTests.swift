import Foundation
import Testing
@_spi(Fuzzing) @testable import Sandbox
import Policies

/// The policy reader against hostile bytes: every input ends in a policy or a
/// `PolicyError`, promptly. Foundation's decoder, which this reader replaced,
/// crashed on the deep inputs here and spun for minutes on the shared ones.
@Suite struct PolicyDecoderTests {
    /// Decodes `bytes`, failing the test if that takes `limit` or more of
    /// this thread's CPU time (not wall-clock time, which a loaded machine
    /// stretches: a parser that spins still spends the CPU).
    @discardableResult
    static func decode(_ bytes: [UInt8], _ label: String = "input", limit: Duration = .seconds(1)) -> Result<Policy, PolicyError> {
        func cpu() -> Duration {
            var now = timespec()
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now)
            return .seconds(now.tv_sec) + .nanoseconds(now.tv_nsec)
        }
        let start = cpu()
        let outcome = Result { () throws(PolicyError) in try Policy(data: bytes, source: label) }
        let elapsed = cpu() - start
        #expect(elapsed < limit, "\(label) took \(elapsed) of CPU time")
        return outcome
    }

    static func refusal(_ bytes: [UInt8], _ label: String = "input") -> String {
        switch decode(bytes, label) {
        case .success: Issue.record("\(label) was accepted"); return ""
        case .failure(let error): return error.description
        }
    }

    static func tree(_ text: String) throws -> [String: PolicyValue] {
        try PropertyListReader.read(Array(text.utf8), source: "tree")
    }

    // MARK: Hostile inputs

    static let xmlHeader = #"<?xml version="1.0" encoding="UTF-8"?><plist version="1.0"><dict><key>a</key>"#

    @Test(arguments: [33, 2_000, 10_000])
    func deepXMLIsRefused(depth: Int) {
        let xml = Self.xmlHeader + String(repeating: "<array>", count: depth) + String(repeating: "</array>", count: depth)
            + "</dict></plist>"
        let problem = Self.refusal(Array(xml.utf8), "nested-\(depth).plist")
        #expect(problem.contains("XML line 1: nested more than 32 deep"), "\(problem)")
        #expect(problem.contains("Policies/"))
    }

    @Test func thirtyTwoLevelsAreAccepted() throws {
        // The top dictionary is level 1: 31 arrays inside it make 32.
        let xml = Self.xmlHeader + String(repeating: "<array>", count: 31) + String(repeating: "</array>", count: 31) + "</dict></plist>"
        let tree = try Self.tree(xml)
        var value = try #require(tree["a"])
        var levels = 1
        while case .array(let items) = value, let first = items.first {
            levels += 1
            value = first
        }
        #expect(levels == 31)
    }

    @Test(arguments: [33, 10_000, 100_000])
    func deepJSONIsRefused(depth: Int) {
        let json = #"{"a":"# + String(repeating: "[", count: depth) + String(repeating: "]", count: depth) + "}"
        #expect(Self.refusal(Array(json.utf8)).contains("JSON line 1: nested more than 32 deep"))
        let objects = #"{"a":"# + String(repeating: #"{"b":"#, count: depth) + "1" + String(repeating: "}", count: depth) + "}"
        #expect(Self.refusal(Array(objects.utf8)).contains("nested more than 32 deep"))
    }

    @Test func aBinaryArrayThatContainsItselfIsRefused() {
        let key = "com.apple.security.device.camera"
        let bytes = BinaryPlist.make([[0xD1, 1, 2], [0x5F, 0x10, UInt8(key.utf8.count)] + Array(key.utf8), [0xA1, 2]])
        #expect(bytes.count == 83)
        #expect(Self.refusal(bytes).contains("binary property list object 2: it contains itself (a reference cycle)"))
        // And through a dictionary: object 0 holds itself as a value.
        let loop = BinaryPlist.make([[0xD1, 1, 0], [0x55] + Array("com.x".utf8)])
        #expect(Self.refusal(loop).contains("object 0: it contains itself"))
    }

    @Test func sharedReferencesCannotMultiplyTheWork() {
        // 31 arrays, each holding the next one twice: 2^31 values once expanded,
        // in 180 bytes. Each object is decoded once; the expanded size is capped.
        var objects: [[UInt8]] = [[0xD1, 1, 2], [0x55] + Array("com.x".utf8)]
        for level in 0..<31 {
            let child = UInt8(level < 30 ? 3 + level : 33)
            objects.append([0xA2, child, child])
        }
        objects.append([0x09])
        #expect(Self.refusal(BinaryPlist.make(objects)).contains("with shared references expanded, more than 100000 values"))

        // A long string used 60,000 times is 60,000 copies for whoever walks the tree.
        let long = String(repeating: "x", count: 1000)
        var strings: [[UInt8]] = [[0xD1, 0, 1, 0, 2], [0x55] + Array("com.x".utf8)]
        strings.append([0xAF, 0x12] + BinaryPlist.bigEndian(60_000, size: 4) + Array(repeating: [0, 3], count: 60_000).flatMap { $0 })
        strings.append([0x5F, 0x11, 0x03, 0xE8] + Array(long.utf8))
        #expect(Self.refusal(BinaryPlist.make(strings, referenceSize: 2)).contains("MiB of text"))
    }

    @Test func overlappingObjectsAreDecodedAtMostOnce() {
        // 2,000 offset-table entries point at one array of 2,000 references:
        // distinct objects, the same bytes, 4 million reads if decoded each time.
        let count = 2_000
        var objects: [[UInt8]] = [[0xD1, 0, 1, 0, 2], [0x55] + Array("com.x".utf8)]
        objects.append([0xAF, 0x11] + BinaryPlist.bigEndian(count, size: 2) + (0..<count).flatMap { BinaryPlist.bigEndian(4 + $0, size: 2) })
        objects.append([0x09])
        objects.append([0xAF, 0x11] + BinaryPlist.bigEndian(count, size: 2) + Array(repeating: [0, 3], count: count).flatMap { $0 })
        let shared = 4
        let bytes = BinaryPlist.make(objects, referenceSize: 2, aliases: Array(repeating: shared, count: count - 1))
        #expect(Self.refusal(bytes).contains("objects overlap"))
    }

    @Test(arguments: [
        // (what, bytes, expected fragment)
        ("count of 2^62", BinaryPlist.make([[0xD1, 1, 2], [0x55] + Array("com.x".utf8), [0xAF, 0x13] + BinaryPlist.bigEndian(1 << 62, size: 8)]),
         "a count of 4611686018427387904 is larger than the file"),
        ("count of 2^64-1 UTF-16 units", BinaryPlist.make([[0xD1, 1, 2], [0x55] + Array("com.x".utf8), [0x6F, 0x13] + [UInt8](repeating: 0xFF, count: 8)]),
         "larger than the file"),
        ("reference past the objects", BinaryPlist.make([[0xD1, 1, 9], [0x55] + Array("com.x".utf8)]), "refers to object 9, but there are 2"),
        ("integer of 2^5 bytes", BinaryPlist.make([[0xD1, 1, 2], [0x55] + Array("com.x".utf8), [0x15, 1]]), "an integer of 2^5 bytes"),
        ("string past the end", BinaryPlist.make([[0xD1, 1, 2], [0x55] + Array("com.x".utf8), [0x5E, 0x41]]), "runs past the objects"),
        ("unknown marker", BinaryPlist.make([[0xD1, 1, 2], [0x55] + Array("com.x".utf8), [0x70]]), "unknown object type 0x70"),
        ("key that is not a string", BinaryPlist.make([[0xD1, 1, 1], [0x09]]), "a dictionary key is boolean true, not a string"),
        ("top is an array", BinaryPlist.make([[0xA0]]), "the top level of this binary property list is an array"),
        ("NUL in an ASCII string", BinaryPlist.make([[0xD1, 1, 2], [0x55] + Array("com.x".utf8), [0x53, 0x61, 0x00, 0x62]]), "holds a NUL"),
        ("half a surrogate", BinaryPlist.make([[0xD1, 1, 2], [0x55] + Array("com.x".utf8), [0x61, 0xD8, 0x00]]), "half a surrogate pair"),
        ("16-byte integer above Int.max", BinaryPlist.make([[0xD1, 1, 2], [0x55] + Array("com.x".utf8), [0x14] + [UInt8](repeating: 0, count: 8) + [UInt8](repeating: 0xFF, count: 8)]),
         "a 16-byte integer out of range"),
    ] as [(String, [UInt8], String)])
    func malformedBinaryIsRefused(what: String, bytes: [UInt8], fragment: String) {
        let problem = Self.refusal(bytes, what)
        #expect(problem.contains(fragment), "\(what): \(problem)")
        #expect(problem.contains("binary property list"), "\(what): \(problem)")
    }

    @Test func malformedTrailersAreRefused() {
        let good = BinaryPlist.make([[0xD1, 1, 2], [0x55] + Array("com.x".utf8), [0x09]])
        #expect(Self.decode(good).map(\.warnings) == .success([
            "com.apple.security.app-sandbox is absent; sandboxed-run sandboxes anyway", "ignoring com.x: sandboxed-run has no equivalent",
        ]))
        let trailer = good.count - 32
        // Every trailer field set to each extreme: never a trap, always a message.
        for field in [6, 7] {
            for value: UInt8 in [0, 9, 0xFF] {
                var bytes = good
                bytes[trailer + field] = value
                #expect(Self.refusal(bytes).contains("must be 1 to 8"))
            }
        }
        for field in [8, 16, 24] {
            let original = BinaryPlist.readBigEndian(Array(good[(trailer + field)...]), size: 8)
            for value: UInt64 in [0, 3, UInt64(good.count), UInt64(Int.max), .max] where value != original {
                var bytes = good
                bytes.replaceSubrange((trailer + field)..<(trailer + field + 8), with: BinaryPlist.bigEndian(value, size: 8))
                _ = Self.refusal(bytes, "trailer field \(field) = \(value)")
            }
        }
        // Offsets pointing into the header, the table and past the end.
        let table = Int(BinaryPlist.readBigEndian(Array(good[(trailer + 24)...]), size: 8))
        for offset: UInt8 in [0, 7, UInt8(table), UInt8(table + 1), 0xFF] {
            var bytes = good
            bytes[table + 2] = offset
            #expect(Self.refusal(bytes).contains("is outside the objects"))
        }
        #expect(Self.refusal(Array("bplist01".utf8) + good.dropFirst(8)).contains("only bplist00"))
        #expect(Self.refusal(Array(good.prefix(41))).contains("too short"))
    }

    @Test func manyValuesAndLargeInputsAreRefused() {
        let many = Self.xmlHeader + "<array>" + String(repeating: "<true/>", count: 100_001) + "</array></dict></plist>"
        #expect(Self.refusal(Array(many.utf8)).contains("more than 100000 values"))
        let json = #"{"a": ["# + String(repeating: "0,", count: 100_001) + "0]}"
        #expect(Self.refusal(Array(json.utf8)).contains("more than 100000 values"))
        let large = Self.xmlHeader + "<string>" + String(repeating: "x", count: 1 << 20) + "</string></dict></plist>"
        #expect(Self.refusal(Array(large.utf8)).contains("larger than 1 MiB"))
    }

    @Test func theLargestAcceptedInputsStillDecodePromptly() {
        let header = "<plist><dict><key>a</key>"
        let inputs = [
            header + "<string>" + String(repeating: "x", count: (1 << 20) - 100) + "</string></dict></plist>",
            header + "<string>" + String(repeating: "&amp;", count: 200_000) + "</string></dict></plist>",
            header + "<array>" + String(repeating: "<!---->", count: 140_000) + "</array></dict></plist>",
            header + "<array>" + String(repeating: "<true/>", count: 99_990) + "</array></dict></plist>",
            #"{"a": ["# + Array(repeating: "1234567", count: 99_990).joined(separator: ",") + "]}",
            #"{"a": ""# + String(repeating: #"\u00e9"#, count: 170_000) + #""}"#,
        ]
        // A megabyte in a debug build, alongside the rest of the suite, takes up
        // to about a second (a few milliseconds in release): the bound is looser.
        for input in inputs {
            #expect(throws: Never.self) { try Self.decode(Array(input.utf8), "\(input.utf8.count) bytes", limit: .seconds(5)).get() }
        }
    }

    @Test(arguments: [
        ("<integer>9223372036854775808</integer>", "is not an integer"),
        ("<integer>-9223372036854775809</integer>", "is not an integer"),
        ("<integer>0x10000000000000000</integer>", "is not an integer"),
        ("<integer>99999999999999999999999999999999</integer>", "is not an integer"),
        ("<integer></integer>", "is not an integer"),
        ("<integer>1 </integer>", "is not an integer"),
        ("<string>a&#1114112;</string>", "&#1114112; is not a character"),
        ("<string>a&#xD800;</string>", "is not a character"),
        ("<string>/usr&#0;/x</string>", "&#0; is not a character"),
        ("<string>&#99999999999999999999;</string>", "&#99999999999999999999; has more than 8 digits"),
        ("<string>&#99999999;</string>", "&#99999999; is not a character"),
        ("<string>&#12a;</string>", "unknown reference '&#12a;'"),
        ("<string>a & b</string>", "write it as &amp;"),
        ("<string>&nbsp;</string>", "unknown reference '&nbsp;'"),
        ("<string>a<b/></string>", "an element inside <string>"),
        ("<string>a", "expected </string>, found </dict"),
        ("<!-- never closed", "comment is not closed"),
        ("<![CDATA[x]]>", "'<' is not followed by an element name"),
        ("<frob/>", "unknown element <frob>"),
        ("<key>b</key><true/>", "XML line 1: <key> outside a <dict>"),
        ("<true/><true/>", "XML line 1: <true> in a <dict> where a <key> should be"),
        ("<array><true/></dict>", "expected </array>, found </dict"),
    ])
    func malformedXMLIsRefused(fragment: String, expected: String) {
        let problem = Self.refusal(Array((Self.xmlHeader + fragment + "</dict></plist>").utf8), fragment)
        #expect(problem.contains(expected), "\(fragment): \(problem)")
    }

    @Test func xmlErrorsNameTheLine() {
        let xml = "<?xml version=\"1.0\"?>\n<plist>\n<dict>\n<key>a</key>\n<string>x</array>\n</dict>\n</plist>\n"
        #expect(Self.refusal(Array(xml.utf8)).contains("XML line 5: expected </string>, found </array"))
        #expect(Self.refusal(Array("<plist><dict><key>a</key>\n\n<true/><key>a</key><true/></dict></plist>".utf8))
            .contains("XML line 3: key 'a' appears twice in one <dict>; keep one"))
        #expect(Self.refusal(Array("<plist>\n<dict/>\n</plist>\nmore".utf8)).contains("XML line 4: text after the end"))
        #expect(Self.refusal(Array("<plist><dict><key>a</key>\n<string>abc".utf8)).contains("XML line 2: <string> is not closed"))
        let doctype = "<?xml version=\"1.0\"?><!DOCTYPE plist [<!ENTITY lol \"lol\">]><plist><dict/></plist>"
        #expect(Self.refusal(Array(doctype.utf8)).contains("XML line 1: only Apple's plist DOCTYPE is allowed"))
        #expect(Self.refusal(Array("<plist><dict><key>a</key><string>\u{1}</string></dict></plist>".utf8))
            .contains("line 1: control character 0x1"))
        #expect(Self.refusal([0x3C, 0x70, 0xC0, 0x80]).contains("byte 0xC0 is not UTF-8"))  // an overlong "\0"
        #expect(Self.refusal(Array("\u{FEFF}<plist/>".utf16).flatMap { [UInt8($0 >> 8), UInt8($0 & 0xFF)] }).contains("UTF-16"))
    }

    @Test(arguments: [
        (#"{"a": "\ud800"}"#, #"\uD800 is half a surrogate pair"#),
        (#"{"a": "\ud800\u0041"}"#, "not followed by the second half"),
        (#"{"a": "\udc00"}"#, #"\uDC00 is not a character"#),
        (#"{"a": "/usr\u0000/x"}"#, #"\u0000 is not a character"#),
        (#"{"a": "\x"}"#, "unknown escape"),
        (#"{"a": "\u12"}"#, "four hexadecimal digits"),
        ("{\"a\": \"tab\tinside\"}", "inside a string"),
        (#"{"a": 9223372036854775808}"#, "is out of range"),
        (#"{"a": -9223372036854775809}"#, "is out of range"),
        (#"{"a": 012}"#, "leading zero"),
        (#"{"a": 1.}"#, "ends in '.'"),
        (#"{"a": 1e}"#, "exponent has no digits"),
        (#"{"a": -}"#, "not followed by a number"),
        (#"{"a": tru}"#, "did you mean true"),
        (#"{"a": 1, "a": 2}"#, "key 'a' appears twice"),
        (#"{"a" 1}"#, "expected ':'"),
        (#"{"a": [1 2]}"#, "expected ',' or ']'"),
        (#"{"a": 1} x"#, "text after the end"),
        (#"{"a": 1"#, "expected ',' or '}' in an object"),
        (#"{"a": "#, "the text ends where a value should be"),
        ("{\n\n\"a\": \"\n", "JSON line 3"),
    ])
    func malformedJSONIsRefused(json: String, expected: String) {
        let problem = Self.refusal(Array(json.utf8), json)
        #expect(problem.contains(expected), "\(json): \(problem)")
        #expect(problem.contains("JSON line"), "\(json): \(problem)")
    }

    @Test func truncatedAndBitFlippedPoliciesNeverCrash() throws {
        for (name, xml) in BuiltinPolicies.all {
            for (form, bytes) in [("xml", xml)] + (try Converted.forms(of: xml)) {
                for length in 0..<bytes.count {
                    Self.decode(Array(bytes[..<length]), "\(name).\(form) cut at \(length)")
                }
                // One flip per byte, the bit varying with the position, and a few bytes set to extremes.
                for index in bytes.indices {
                    var flipped = bytes
                    flipped[index] ^= 1 << UInt8(index % 8)
                    Self.decode(flipped, "\(name).\(form) flipped at \(index)")
                    if index % 7 == 0 {
                        for value: UInt8 in [0x00, 0x7F, 0xFF] {
                            flipped[index] = value
                            Self.decode(flipped, "\(name).\(form) with \(value) at \(index)")
                        }
                    }
                }
            }
        }
    }

    // MARK: What real policies hold

    @Test func theThreeFormsOfEachShippedPolicyAreEqual() throws {
        for (name, xml) in BuiltinPolicies.all {
            let expected = try Policy(data: xml, source: name)
            #expect(expected.systemPaths.count > 10)
            for (form, bytes) in try Converted.forms(of: xml) {
                #expect(try Policy(data: bytes, source: name) == expected, "\(name) as \(form)")
                #expect(try PropertyListReader.read(bytes, source: name) == PropertyListReader.read(xml, source: name))
            }
        }
    }

    @Test func aMacOSEntitlementsFileWithNestedUnknownKeysGivesWarnings() throws {
        let entitlements = """
            <?xml version="1.0" encoding="UTF-8"?>
            <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
            <plist version="1.0">
            <dict>
            \t<key>com.apple.security.app-sandbox</key>
            \t<true/>
            \t<key>com.apple.security.files.user-selected.read-write</key>
            \t<true/>
            \t<key>com.apple.developer.associated-domains</key>
            \t<array>
            \t\t<string>applinks:example.com</string>
            \t\t<string>webcredentials:example.com</string>
            \t</array>
            \t<key>com.apple.developer.icloud-container-identifiers</key>
            \t<array/>
            \t<key>com.apple.developer.nfc.readersession.formats</key>
            \t<dict>
            \t\t<key>tags</key>
            \t\t<array><dict><key>x</key><real>1.5</real><key>when</key><date>2024-01-01T00:00:00Z</date></dict></array>
            \t\t<key>blob</key><data>
            \t\tAAEC
            \t\t</data>
            \t</dict>
            \t<key>com.apple.developer.ubiquity-kvstore-identifier</key>
            \t<string>$(TeamIdentifierPrefix)$(CFBundleIdentifier)</string>
            </dict>
            </plist>
            """
        let xml = Array(entitlements.utf8)
        let policy = try Policy(data: xml, source: "App.entitlements")
        #expect(policy.userSelectedAccess == .readWrite)
        #expect(policy.warnings == [
            "ignoring com.apple.developer.associated-domains: sandboxed-run has no equivalent",
            "ignoring com.apple.developer.icloud-container-identifiers: sandboxed-run has no equivalent",
            "ignoring com.apple.developer.nfc.readersession.formats: sandboxed-run has no equivalent",
            "ignoring com.apple.developer.ubiquity-kvstore-identifier: sandboxed-run has no equivalent",
        ])
        for (form, bytes) in try Converted.forms(of: xml) {
            #expect(try Policy(data: bytes, source: "App.entitlements") == policy, "\(form)")
        }
    }

    @Test func xmlMarkupIsRead() throws {
        let tree = try Self.tree("""
            \u{FEFF}<?xml version="1.0" encoding="utf-8" standalone='no' ?>
            <!-- before --><!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
            <!-- after -->
            <plist version='1.0' ><dict>
              <key>s</key><string>&lt;a&gt; &amp; &quot;q&quot; &apos;&#65;&#x1F600;&#00000065;<![CDATA[<raw> & ]]>é $null</string>
              <key>e</key><string/>
              <key>n</key><array><integer>-42</integer><integer>0x1F</integer><integer>-9223372036854775808</integer></array>
              <key>b</key><array><true/><false /><true></true></array>
              <key>o</key><array><real>1.5</real><real>443</real><real>1.</real><real>-.5e1</real><date>2024-01-01T00:00:00Z</date><data>
                AAEC
              </data></array>
              <key>c</key><array/><!-- between -->
              <key>d</key><dict/>
              <key></key><string>empty key</string>
              <key>&#36;null</key><string><![CDATA[$null]]></string>
            </dict></plist>
            <!-- end -->
            """)
        let expected: [String: PolicyValue] = [
            "s": .string("<a> & \"q\" 'A😀A<raw> & é $null"), "e": .string(""),
            "n": .array([.integer(-42), .integer(31), .integer(.min)]),
            "b": .array([.bool(true), .bool(false), .bool(true)]),
            "o": .array([.other("a real number"), .integer(443), .integer(1), .integer(-5), .other("a date"), .other("data")]),
            "c": .array([]), "d": .dictionary([:]), "": .string("empty key"), "$null": .string("$null"),
        ]
        #expect(tree == expected)
        // Foundation's decoder also took a bare <dict> without <plist>.
        #expect(try Self.tree("<dict><key>a</key><true/></dict>") == ["a": .bool(true)])
        // The DOCTYPE Apple's tools wrote before 2006.
        let older = #"<!DOCTYPE plist PUBLIC '-//Apple Computer//DTD PLIST 1.0//EN' 'http://www.apple.com/DTDs/PropertyList-1.0.dtd' >"#
        #expect(try Self.tree(older + "<plist><dict/></plist>") == [:])
    }

    @Test func jsonIsRead() throws {
        let tree = try Self.tree(#"""
            {"s": "a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00", "n": [0, -0, 9223372036854775807, -9223372036854775808, 1.5, 443.0, 1e2, -1E-2],
             "b": [true, false, null], "o": {}, "a": [], "trailing": [1,],}
            """#)
        let expected: [String: PolicyValue] = [
            "s": .string("a\"\\/\u{8}\u{C}\n\r\té😀"),
            "n": .array([.integer(0), .integer(0), .integer(.max), .integer(.min), .other("a real number"), .integer(443), .integer(100),
                         .other("a real number")]),
            "b": .array([.bool(true), .bool(false), .other("null")]), "o": .dictionary([:]), "a": .array([]),
            "trailing": .array([.integer(1)]),
        ]
        #expect(tree == expected)
    }

    @Test func binaryTypesAreRead() throws {
        let script = """
            import plistlib, sys, datetime
            value = {"ints": [0, 255, 256, 65536, 2**32, -1, -2**63, 2**63 - 1],
                     "texts": ["ascii", "é😀", ""], "others": [1.5, 443.0, b"data", datetime.datetime(2024, 1, 1), plistlib.UID(7)],
                     "bools": [True, False], "nested": {"a": [{"b": []}]}}
            sys.stdout.buffer.write(plistlib.dumps(value, fmt=plistlib.FMT_BINARY))
            """
        let bytes = try Converted.python(script)
        let ints: [Int] = [0, 255, 256, 65536, 1 << 32, -1, .min, .max]
        let expected: [String: PolicyValue] = [
            "ints": .array(ints.map { PolicyValue.integer($0) }),
            "texts": .array([.string("ascii"), .string("é😀"), .string("")]),
            "others": .array([.other("a real number"), .integer(443), .other("data"), .other("a date"), .other("a UID")]),
            "bools": .array([.bool(true), .bool(false)]),
            "nested": .dictionary(["a": .array([.dictionary(["b": .array([])])])]),
        ]
        #expect(try PropertyListReader.read(bytes, source: "types") == expected)
        // 2^64 - 1 needs 16 bytes: out of range, refused rather than wrapped.
        let big = try Converted.python("import plistlib, sys; sys.stdout.buffer.write(plistlib.dumps({'a': 2**64 - 1}, fmt=plistlib.FMT_BINARY))")
        #expect(Self.refusal(big).contains("a 16-byte integer out of range"))
    }

    @Test func dotDotIsFoundAsTheKernelSplitsPaths() {
        // Split by Characters, "/\u{301}" is one Character and the ".." hid behind it.
        let json = #"{"org.sandboxed-run.system-paths.read-only": ["/usr/../\u0301etc"]}"#
        #expect(Self.refusal(Array(json.utf8)).contains("must be an absolute path without '..'"))
        let plain = #"{"org.sandboxed-run.system-paths.read-only": ["/usr/..", "/..", "/usr/share/.."]}"#
        #expect(Self.refusal(Array(plain.utf8)).contains("without '..'"))
    }

    @Test func printedNamesAreEscaped() throws {
        let json = #"{"com.example.\u001b]0;pwned\u0007": true, "org.sandboxed-run.system-paths.read-only": ["rel\u202Eative"]}"#
        let problem = Self.refusal(Array(json.utf8))
        #expect(problem.contains(#"'rel\u{202e}ative' must be an absolute path"#), "\(problem)")
        let warned = try Policy(data: Array(#"{"com.example.\u001b[2J": true}"#.utf8), source: "p.json")
        #expect(warned.warnings.last == #"ignoring com.example.\x1b[2J: sandboxed-run has no equivalent"#)
        #expect(!Self.refusal(Array(#"{"org.sandboxed-run.\u001b": 1}"#.utf8)).contains("\u{1b}"))
    }

    @Test func everySeedInTheFuzzCorpusEndsPromptly() throws {
        let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../Fuzz/PolicyCorpus")
        let names = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        #expect(names.count >= 15)
        for name in names {
            Self.decode(Array(try Data(contentsOf: folder.appendingPathComponent(name))), name)
        }
    }

    // MARK: Policy files

    @Test func aFIFOIsRefusedWithoutWaiting() throws {
        let scratch = Scratch()
        let fifo = scratch.path + "/policy.plist"
        #expect(mkfifo(fifo, 0o600) == 0)
        let link = scratch.path + "/link.plist"
        #expect(symlink(fifo, link) == 0)
        for path in [fifo, link] {
            // Should the open ever block again, a writer arriving after two seconds
            // releases it: the test then fails on time instead of hanging the suite.
            let rescue = DispatchWorkItem {
                let fd = open(fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
                if fd >= 0 { close(fd) }
            }
            DispatchQueue.global().asyncAfter(deadline: .now() + 2, execute: rescue)
            let start = ContinuousClock.now
            let problem = Self.fileRefusal(path)
            rescue.cancel()
            #expect(ContinuousClock.now - start < .seconds(1))
            #expect(problem.contains("is a FIFO (named pipe)"), "\(problem)")
            #expect(problem.contains("not a regular file; give the path of a policy file"), "\(problem)")
        }
    }

    @Test func devicesDirectoriesAndSocketsAreRefused() throws {
        #expect(Self.fileRefusal("/dev/null").contains("is a character device, not a regular file"))
        #expect(Self.fileRefusal("/dev/zero").contains("is a character device"))
        let scratch = Scratch()
        #expect(Self.fileRefusal(scratch.path).contains("is a directory, not a regular file"))
        let socketPath = scratch.path + "/policy.sock"
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(socketPath.utf8) + [0]) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        #expect(bound == 0)
        #expect(Self.fileRefusal(socketPath).contains("is a socket"))
        #expect(Self.fileRefusal(scratch.path + "/missing.plist").contains("cannot read it"))
    }

    @Test func regularFilesAreReadUpToTheLimit() throws {
        let scratch = Scratch()
        let path = scratch.file("writer.plist", String(decoding: BuiltinPolicies.all[0].plist, as: UTF8.self))
        #expect(try Policy(contentsOfFile: path).systemPaths == Policy.defaultPolicy.systemPaths)
        let large = scratch.file("large.plist", String(repeating: " ", count: (1 << 20) + 1))
        #expect(Self.fileRefusal(large).contains("larger than 1 MiB"))
        let exact = scratch.file("exact.json", "{}" + String(repeating: " ", count: (1 << 20) - 2))
        #expect(try Policy(contentsOfFile: exact).warnings == ["com.apple.security.app-sandbox is absent; sandboxed-run sandboxes anyway"])
        // A regular file whose size fstat gives as 0 is still read, in growing steps.
        #expect(Self.fileRefusal("/proc/self/status").contains("neither a property list (XML or binary) nor a JSON object"))
    }

    static func fileRefusal(_ path: String) -> String {
        do {
            _ = try Policy(contentsOfFile: path)
            Issue.record("\(path) was accepted")
            return ""
        } catch {
            return "\(error)"
        }
    }
}

/// Builds binary property lists by hand, for inputs no writer produces.
enum BinaryPlist {
    /// `objects` encoded in order, then aliases (table entries repeating the
    /// offset of an earlier object), the offset table and the trailer; the top is object 0.
    static func make(_ objects: [[UInt8]], referenceSize: Int = 1, aliases: [Int] = []) -> [UInt8] {
        var bytes = Array("bplist00".utf8)
        var offsets: [Int] = []
        for object in objects {
            offsets.append(bytes.count)
            bytes += object
        }
        offsets += aliases.map { offsets[$0] }
        let table = bytes.count
        let offsetSize = table < 256 ? 1 : table < 65536 ? 2 : 4
        for offset in offsets { bytes += bigEndian(UInt64(offset), size: offsetSize) }
        bytes += [UInt8](repeating: 0, count: 6) + [UInt8(offsetSize), UInt8(referenceSize)]
        bytes += bigEndian(UInt64(offsets.count), size: 8) + bigEndian(0, size: 8) + bigEndian(UInt64(table), size: 8)
        return bytes
    }

    static func bigEndian(_ value: UInt64, size: Int) -> [UInt8] {
        (0..<size).map { UInt8(truncatingIfNeeded: value >> (8 * UInt64(size - 1 - $0))) }
    }

    static func bigEndian(_ value: Int, size: Int) -> [UInt8] { bigEndian(UInt64(value), size: size) }

    static func readBigEndian(_ bytes: [UInt8], size: Int) -> UInt64 {
        bytes.prefix(size).reduce(0) { $0 << 8 | UInt64($1) }
    }
}

/// Other forms of a policy, written by Python's plistlib and json.
enum Converted {
    static func forms(of xml: [UInt8]) throws -> [(String, [UInt8])] {
        let scratch = Scratch()
        let input = scratch.path + "/policy.plist"
        try Data(xml).write(to: URL(fileURLWithPath: input))
        let binary = try python("import plistlib, sys; sys.stdout.buffer.write(plistlib.dumps(plistlib.load(open(sys.argv[1], 'rb')), fmt=plistlib.FMT_BINARY))", input)
        let json = try python("import plistlib, json, sys; sys.stdout.write(json.dumps(plistlib.load(open(sys.argv[1], 'rb')), indent=2, default=str))", input)
        return [("binary", binary), ("json", json)]
    }

    /// What `script` writes to standard output, as bytes.
    static func python(_ script: String, _ arguments: String...) throws -> [UInt8] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Run.python)
        process.arguments = ["-c", script] + arguments
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let bytes = try output.fileHandleForReading.readAll()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        return Array(bytes)
    }
}
