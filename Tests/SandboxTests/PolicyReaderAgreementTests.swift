import Foundation
@_spi(Fuzzing) import PolicyOracle
import Testing
@_spi(Fuzzing) @testable import Sandbox
import Policies

/// Apple's property list reader (CFPropertyList, and Foundation's
/// PropertyListDecoder after it) is not an XML parser. A file it reads one way
/// and an XML parser (or this reader) another could pass a review done with
/// Apple's tools and grant more here, so the reader refuses every construct
/// the two read differently, and what it accepts Foundation reads alike.
@Suite struct PolicyReaderAgreementTests {
    /// Foundation's reading of a value (the oracle Fuzz/PolicyFuzzer uses too).
    typealias AppleValue = FoundationValue

    static let header = #"<?xml version="1.0" encoding="UTF-8"?>"# + "\n"
    static let network = "<key>com.apple.security.network.client</key><true/>"

    static func write(_ bytes: [UInt8], in scratch: Scratch) throws -> String {
        let path = scratch.path + "/p.plist"
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    static func refusal(_ bytes: [UInt8]) -> String {
        do {
            let policy = try Policy(data: bytes, source: "p.plist")
            Issue.record("accepted: network client \(policy.networkClient), warnings \(policy.warnings)")
            return ""
        } catch {
            return error.description
        }
    }

    /// The fuzzer's finding: a DOCTYPE whose system literal holds '>' and a
    /// whole property list. Apple's reader ends the DOCTYPE at the first '>',
    /// reads the plist inside the literal and nothing after it; an XML parser
    /// (Python's expat here, and this reader before) skips the literal and reads
    /// the plist after it, which grants the network.
    @Test func aDoctypeLiteralCannotShowAppleAnotherPolicy() throws {
        let decoy = "<plist><dict><key>com.apple.security.app-sandbox</key><true/></dict></plist>"
        let real = "<plist><dict><key>com.apple.security.app-sandbox</key><true/>" + Self.network + "</dict></plist>"
        let file = Array((Self.header + #"<!DOCTYPE plist SYSTEM ">"# + decoy + "\">\n" + real + "\n").utf8)
        #expect(AppleValue.readPropertyList(file) == ["com.apple.security.app-sandbox": .bool(true)])
        let scratch = Scratch()
        let expat = try Converted.python(
            "import plistlib, sys; sys.stdout.write(str(sorted(plistlib.load(open(sys.argv[1], 'rb')))))", try Self.write(file, in: scratch))
        #expect(String(decoding: expat, as: UTF8.self) == "['com.apple.security.app-sandbox', 'com.apple.security.network.client']")
        #expect(Self.refusal(file).contains("XML line 2: only Apple's plist DOCTYPE is allowed"))
    }

    /// `<!-->` ended a comment at once here; Apple's reader looks for `-->`
    /// after `<!--`, so the key between is a comment to it.
    @Test func aShortCommentCannotHideAKeyFromApple() {
        let file = Array((Self.header + "<plist><dict><!-->" + Self.network + "<!-- --></dict></plist>").utf8)
        #expect(AppleValue.readPropertyList(file) == [:])
        #expect(Self.refusal(file).contains("'--' inside a comment"))
        let dashes = Array((Self.header + "<plist><dict><!--->" + Self.network + "<!-- --></dict></plist>").utf8)
        #expect(AppleValue.readPropertyList(dashes) == [:])
        #expect(Self.refusal(dashes).contains("'--' inside a comment"))
    }

    /// Apple's reader ends a start tag at the first '>', quoted or not: the
    /// path it reads is not the one granted here.
    @Test func anAttributeCannotChangeWhatApplesReaderSees() {
        let file = Array((Self.header + "<plist><dict><key>org.sandboxed-run.system-paths.read-write</key>"
            + #"<array><string note="a>b">/home</string></array></dict></plist>"#).utf8)
        #expect(AppleValue.readPropertyList(file) == ["org.sandboxed-run.system-paths.read-write": .array([.string("b\">/home")])])
        #expect(Self.refusal(file).contains("<string> has attributes"))
    }

    /// On macOS, Apple's tools read the bytes in the declared encoding.
    @Test func anEncodingOtherThanUTF8IsRefused() throws {
        let file = Array(#"<?xml version="1.0" encoding="ISO-8859-1"?><plist><dict><key>org.sandboxed-run.system-paths.read-only</key><array><string>/srv/é</string></array></dict></plist>"#.utf8)
        let scratch = Scratch()
        let expat = try Converted.python(
            "import plistlib, sys; sys.stdout.buffer.write(plistlib.load(open(sys.argv[1], 'rb'))['org.sandboxed-run.system-paths.read-only'][0].encode())",
            try Self.write(file, in: scratch))
        #expect(String(decoding: expat, as: UTF8.self) == "/srv/Ã©")
        #expect(Self.refusal(file).contains("names encoding 'ISO-8859-1'"))
    }

    static let doctypeAndSubset: String = #"<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd" [<!ENTITY e "x">]>"#
    static let longReal: String = "<plist><dict><key>a</key><real>" + String(repeating: "1", count: 65) + "</real></dict></plist>"
    static let appleDoctype = #"<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">"#
    static let twoDoctypes: String = appleDoctype + appleDoctype + "<plist><dict/></plist>"

    static let divergent: [(String, String)] = [
        // Prolog
        ("<!DOCTYPE plist><plist><dict/></plist>", "only Apple's plist DOCTYPE"),
        (#"<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://example.com/x.dtd"><plist><dict/></plist>"#, "only Apple's plist DOCTYPE"),
        (doctypeAndSubset + "<plist><dict/></plist>", "only Apple's plist DOCTYPE"),
        (twoDoctypes, "a second <!DOCTYPE>"),
        ("<?><plist><dict/></plist>", "a processing instruction"),
        ("<?xml-stylesheet href=\"a\"?><plist><dict/></plist>", "a processing instruction"),
        ("<plist><dict><?x?></dict></plist>", "a processing instruction"),
        ("<plist><dict/></plist><?x?>", "a processing instruction"),
        ("<plist><dict><!-- a -- b --></dict></plist>", "'--' inside a comment"),
        ("<plist><dict/></plist>\u{0}", "control character"),
        ("<dict/>", "the file ends right after <dict>"),
        // Tags
        ("<plist version=\"2.0\"><dict/></plist>", "version=\"1.0\" or no attribute"),
        ("<plist><dict x=\"1\"></dict></plist>", "<dict> has attributes"),
        ("<plist><dict><key/><true/></dict></plist>", "<key/> is refused"),
        ("<plist><dict><key>a</key><true> </true></dict></plist>", "expected </true>"),
        ("<plist><dict><key>a</key><integer/></dict></plist>", "<integer/> is empty"),
        ("<plist><dict><key>a</key><real/></dict></plist>", "<real/> is empty"),
        ("<plist><dict><key>a</key><date/></dict></plist>", "<date/> is empty"),
        ("<plist><dict><key>a</key><data/></dict></plist>", "<data/> is empty"),
        // Text of strings and keys
        ("<plist><dict><key>a</key><string>$null</string></dict></plist>", "starting with '$null'"),
        ("<plist><dict><key>$null</key><true/></dict></plist>", "starting with '$null'"),
        ("<plist><dict><key>a</key><dict><key>CF$UID</key><integer>1</integer></dict></dict></plist>", "the key 'CF$UID'"),
        ("<plist><dict><key>a</key><string>x<!-- c -->y</string></dict></plist>", "a comment or processing instruction inside <string>"),
        ("<plist><dict><key>a<?p?></key><true/></dict></plist>", "a comment or processing instruction inside <key>"),
        ("<plist><dict><key>a</key><string>&#000000065;</string></dict></plist>", "has more than 8 digits"),
        // Plain values
        ("<plist><dict><key>a</key><integer>&#49;</integer></dict></plist>", "a reference (&...;) inside <integer>"),
        ("<plist><dict><key>a</key><integer> 1</integer></dict></plist>", "is not an integer"),
        ("<plist><dict><key>a</key><integer>1<!-- c --></integer></dict></plist>", "expected </integer>"),
        ("<plist><dict><key>a</key><integer><![CDATA[1]]></integer></dict></plist>", "expected </integer>"),
        ("<plist><dict><key>a</key><real>0x10</real></dict></plist>", "is not a number"),
        ("<plist><dict><key>a</key><real> 5</real></dict></plist>", "is not a number"),
        ("<plist><dict><key>a</key><real>nan</real></dict></plist>", "is not a number"),
        ("<plist><dict><key>a</key><real>1e</real></dict></plist>", "is not a number"),
        (longReal, "is not a number"),
        ("<plist><dict><key>a</key><date>yesterday</date></dict></plist>", "is not a date"),
        ("<plist><dict><key>a</key><date>2024-01-01T00:00:00</date></dict></plist>", "is not a date"),
        ("<plist><dict><key>a</key><data>AA*EC</data></dict></plist>", "is not base64"),
        ("<plist><dict><key>a</key><data>AAéC</data></dict></plist>", "is not base64"),
        // The declaration
        ("<?xml version=\"1.1\"?><plist><dict/></plist>", "the XML declaration is malformed"),
        ("<?xml version=\"1.0\" encoding=\"UTF-16\"?><plist><dict/></plist>", "names encoding 'UTF-16'"),
        ("<?xml version=\"1.0\" standalone=\"maybe\"?><plist><dict/></plist>", "the XML declaration is malformed"),
        (" <?xml version=\"1.0\"?><plist><dict/></plist>", "must come first"),
        ("<!-- c --><?xml version=\"1.0\"?><plist><dict/></plist>", "must come first"),
    ]

    @Test(arguments: divergent)
    func whatApplesReaderReadsDifferentlyIsRefused(input: String, fragment: String) {
        let problem = Self.refusal(Array(input.utf8))
        #expect(problem.contains(fragment), "\(input): \(problem)")
    }

    /// Binary property lists: a 16-byte integer is signed to CoreFoundation
    /// and unsigned to Foundation; `$null` is no value to Foundation; a table
    /// that does not end at the trailer, or references too narrow for the
    /// objects, Apple's reader refuses.
    @Test func binaryFormsApplesReadersDisagreeOnAreRefused() {
        let key: [UInt8] = [0x51, UInt8(ascii: "a")]
        let minusOne = BinaryPlist.make([[0xD1, 1, 2], key, [0x14] + [UInt8](repeating: 0xFF, count: 16)])
        #expect(AppleValue.readPropertyList(minusOne) == ["a": .other])  // 2^64 - 1 to Foundation, -1 to CoreFoundation
        #expect(Self.refusal(minusOne).contains("a 16-byte integer out of range"))
        let null = BinaryPlist.make([[0xD1, 1, 2], key, [0x55] + Array("$null".utf8)])
        #expect(AppleValue.readPropertyList(null) == ["a": .other])
        #expect(Self.refusal(null).contains("the string '$null'"))
        let utf16 = BinaryPlist.make([[0xD1, 1, 2], key, [0x65] + Array("$null".utf16).flatMap { [UInt8($0 >> 8), UInt8($0 & 0xFF)] }])
        #expect(Self.refusal(utf16).contains("the string '$null'"))
        var gap = BinaryPlist.make([[0xD1, 1, 2], key, [0x09]])
        gap.insert(0, at: gap.count - 32)
        #expect(AppleValue.readPropertyList(gap) == nil)
        #expect(Self.refusal(gap).contains("does not end where the trailer starts"))
        // 300 objects with 1-byte references: Foundation refuses the trailer.
        var objects: [[UInt8]] = [[0xD1, 1, 2], key, [0x09]]
        objects += Array(repeating: [0x08], count: 297)
        let narrow = BinaryPlist.make(objects)
        #expect(AppleValue.readPropertyList(narrow) == nil)
        #expect(Self.refusal(narrow).contains("references of 1 bytes cannot name 300 objects"))
    }

    /// Everything the reader accepts here, Foundation reads as the same tree.
    @Test func acceptedFilesMeanTheSameToApple() throws {
        var files: [(String, [UInt8])] = []
        for (name, xml) in BuiltinPolicies.all {
            files.append((name, xml))
            files += try Converted.forms(of: xml).filter { $0.0 == "binary" }.map { ("\(name).\($0.0)", $0.1) }
        }
        files.append(("markup", Array("""
            \u{FEFF}<?xml version="1.0" encoding="utf-8" standalone='no' ?>
            <!-- before --><!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
            <!-- after -->
            <plist version='1.0' ><dict>
              <key>s</key><string>&lt;a&gt; &amp; &quot;q&quot; &apos;&#65;&#x1F600;&#00000065;<![CDATA[<raw> & ]]>é $null</string>
              <key>e</key><string/>
              <key>n</key><array><integer>-42</integer><integer>+0x1F</integer><integer>-9223372036854775808</integer></array>
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
            """.utf8)))
        for (name, bytes) in files {
            let ours = try PropertyListReader.read(bytes, source: name)
            #expect(AppleValue.readPropertyList(bytes) == AppleValue(.dictionary(ours)).dictionaryValue, "\(name)")
        }
    }
}
