import SystemKit
/// Reads an XML property list: what Policies/*.plist and macOS `.entitlements`
/// files hold.
///
/// Apple's reader (CFPropertyList, and Foundation's PropertyListDecoder, which
/// follows it) is not an XML parser: it ends a DOCTYPE or a start tag at the
/// first `>` even inside quotes, expands a `$null` string to nothing, reads a
/// one-key `CF$UID` dictionary as an archiver reference, and honours the
/// declared encoding. An XML parser does none of that. A file read one way by
/// Apple's tools and another way here would let a policy reviewed with them
/// grant more here, so this reader accepts only what both read alike, and
/// refuses the rest with a message:
/// - prolog: `<?xml version="1.0" encoding="UTF-8"?>` first in the file (the
///   encoding UTF-8 or absent), comments, and at most one DOCTYPE, which must
///   be Apple's plist DOCTYPE exactly (`appleDoctype`);
/// - no other processing instruction; no attribute but `version="1.0"` on `<plist>`;
/// - comments (without `--` inside) between elements, never inside text;
/// - `<string>` and `<key>`: text, CDATA sections, the five named entities
///   and numeric character references of at most 8 digits; not starting with
///   `$null`; no key `CF$UID`; `<key/>` is refused (Apple's reader reads the
///   text after it);
/// - `<integer>`, `<real>`, `<date>`, `<data>`: plain characters in the syntax
///   Apple's reader takes, not empty, with no reference, comment or CDATA;
/// - `<true/>` or `<true></true>`, likewise `<false/>`.
/// Nothing is expanded but references, so no entity can grow. The input has
/// been checked to be UTF-8 without stray control characters.
struct XMLPropertyListReader {
    private let bytes: [UInt8]
    private let source: String
    private var at: Int
    private var objects = 0

    /// The DOCTYPE Xcode and `plutil` write; "Apple Computer" is what they wrote before 2006.
    static let appleDoctype = #"<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">"#
    private static let publicIDs = ["-//Apple//DTD PLIST 1.0//EN", "-//Apple Computer//DTD PLIST 1.0//EN"]
    private static let systemID = "http://www.apple.com/DTDs/PropertyList-1.0.dtd"
    static let declaration = #"<?xml version="1.0" encoding="UTF-8"?>"#

    /// `start`: the first byte after any byte order mark.
    init(_ bytes: [UInt8], source: String, start: Int) {
        self.bytes = bytes
        self.source = source
        self.at = start
    }

    mutating func read() throws(PolicyError) -> PolicyValue {
        if looking(at: "<?xml"), at + 5 < bytes.count, TextInput.isSpace(bytes[at + 5]) || bytes[at + 5] == UInt8(ascii: "?") {
            try xmlDeclaration()
        }
        var doctype = false
        while true {
            try skipMisc()
            guard looking(at: "<!DOCTYPE") else { break }
            guard !doctype else { throw fail("a second <!DOCTYPE>; keep one: \(Self.appleDoctype)") }
            try self.doctype()
            doctype = true
        }
        guard at < bytes.count else { throw fail("no <plist> element") }
        guard bytes[at] == UInt8(ascii: "<") else { throw fail("text before the <plist> element") }
        let root = try startTag()
        let value: PolicyValue
        if root.name == "plist" {
            guard !root.empty else { throw fail(at: root.offset, "<plist/> is empty; it should hold a <dict>") }
            try skipMisc()
            guard at < bytes.count, bytes[at] == UInt8(ascii: "<"), !looking(at: "</") else {
                throw fail("<plist> should hold a <dict>")
            }
            value = try self.value(try startTag(), depth: 1)
            try skipMisc()
            try endTag("plist")
        } else {
            value = try self.value(root, depth: 1)  // a bare value: Apple's parser accepts it too
        }
        try skipMisc()
        guard at == bytes.count else { throw fail("text after the end of the property list") }
        return value
    }

    // MARK: Values

    /// The value whose start tag comes next, inside `context`.
    /// (`context` is built only for a message: it escapes a key.)
    private mutating func value(depth: Int, context: @autoclosure () -> String) throws(PolicyError) -> PolicyValue {
        guard at < bytes.count else { throw fail("\(context()) is not closed") }
        guard bytes[at] == UInt8(ascii: "<") else { throw fail("text outside a <string>; values are elements") }
        if looking(at: "</") { throw fail("\(context()) has no value") }
        return try value(try startTag(), depth: depth)
    }

    /// The value that starts with `tag`.
    private mutating func value(_ tag: Tag, depth: Int) throws(PolicyError) -> PolicyValue {
        objects += 1
        guard objects <= PropertyListReader.maxObjects else {
            throw fail(at: tag.offset, "more than \(PropertyListReader.maxObjects) values; a policy has a few dozen")
        }
        switch tag.name {
        case "dict":
            guard depth <= PropertyListReader.maxDepth else { throw tooDeep(tag) }
            var entries: [String: PolicyValue] = [:]
            if tag.empty { return .dictionary(entries) }
            while true {
                try skipMisc()
                if looking(at: "</") {
                    try endTag("dict")
                    return .dictionary(entries)
                }
                guard at < bytes.count else { throw fail(at: tag.offset, "<dict> is not closed") }
                guard bytes[at] == UInt8(ascii: "<") else { throw fail("text in a <dict>; it holds <key> and value pairs") }
                let keyTag = try startTag()
                guard keyTag.name == "key" else {
                    throw fail(at: keyTag.offset, "<\(keyTag.shown)> in a <dict> where a <key> should be")
                }
                guard !keyTag.empty else {
                    // Apple's reader takes the text after <key/> as the key.
                    throw fail(at: keyTag.offset, "<key/> is refused (Apple's reader reads it differently); write <key></key> for an empty key")
                }
                let key = try text(of: "key")
                if key == "CF$UID" {
                    throw fail(at: keyTag.offset, "the key 'CF$UID' makes a dictionary an archiver reference (a UID) to Apple's reader; remove it")
                }
                try skipMisc()
                let entry = try value(depth: depth + 1, context: "key '\(PropertyListReader.printable(key))'")
                guard entries.updateValue(entry, forKey: key) == nil else {
                    throw fail(at: keyTag.offset, "key '\(PropertyListReader.printable(key))' appears twice in one <dict>; keep one")
                }
            }
        case "array":
            guard depth <= PropertyListReader.maxDepth else { throw tooDeep(tag) }
            var items: [PolicyValue] = []
            if tag.empty { return .array(items) }
            while true {
                try skipMisc()
                if looking(at: "</") {
                    try endTag("array")
                    return .array(items)
                }
                items.append(try value(depth: depth + 1, context: "<array>"))
            }
        case "string":
            return .string(tag.empty ? "" : try text(of: "string"))
        case "integer", "real", "date", "data":
            guard !tag.empty else {
                throw fail(at: tag.offset, "<\(tag.name)/> is empty; Apple's reader refuses it: give a value or remove the entry")
            }
            let plain = try plainText(of: tag.name)
            func wrong(_ expected: String) -> PolicyError {
                fail(at: tag.offset, "<\(tag.name)>\(PropertyListReader.printable(String(decoding: plain, as: UTF8.self)))</\(tag.name)> "
                    + "is not \(expected)")
            }
            switch tag.name {
            case "integer":
                guard let number = Self.integer(plain) else {
                    throw wrong("an integer: write digits only, from \(Int.min) to \(Int.max)")
                }
                return .integer(number)
            case "real":
                // An integral real reads as an integer, as in Foundation's decoder.
                guard let number = Self.real(plain) else {
                    throw wrong("a number: write digits with an optional sign, '.' and exponent, at most 64 characters")
                }
                return PropertyListReader.real(number)
            case "date":
                guard Self.isDate(plain) else { throw wrong("a date: write YYYY-MM-DDThh:mm:ssZ") }
                return .other("a date")
            default:
                guard plain.allSatisfy({ Self.isBase64($0) || TextInput.isSpace($0) }) else {
                    throw wrong("base64: write letters, digits, '+', '/' and '=' only")
                }
                return .other("data")
            }
        case "true", "false":
            if !tag.empty { try endTag(tag.name) }  // nothing between, as Apple's reader requires
            return .bool(tag.name == "true")
        case "key":
            throw fail(at: tag.offset, "<key> outside a <dict>")
        default:
            throw fail(at: tag.offset, "unknown element <\(tag.shown)>; a property list holds dict, array, key, "
                + "string, integer, real, true, false, date and data")
        }
    }

    private func tooDeep(_ tag: Tag) -> PolicyError {
        fail(at: tag.offset, "nested more than \(PropertyListReader.maxDepth) deep; a policy needs two levels")
    }

    /// Decimal, or hexadecimal after `0x`, with an optional sign; nil if
    /// malformed or out of range. (Apple's reader also skips white space
    /// around the sign; this one does not, so a file means one thing.)
    static func integer(_ text: ArraySlice<UInt8>) -> Int? {
        var digits = text
        var negative = false
        if let sign = digits.first, sign == UInt8(ascii: "-") || sign == UInt8(ascii: "+") {
            negative = sign == UInt8(ascii: "-")
            digits.removeFirst()
        }
        var radix: UInt64 = 10
        if digits.starts(with: "0x".utf8) || digits.starts(with: "0X".utf8) {
            radix = 16
            digits.removeFirst(2)
        }
        guard !digits.isEmpty else { return nil }
        var magnitude: UInt64 = 0
        for byte in digits {
            guard let digit = TextInput.digit(byte), digit < radix else { return nil }
            let (shifted, overflow) = magnitude.multipliedReportingOverflow(by: radix)
            let (sum, carry) = shifted.addingReportingOverflow(digit)
            guard !overflow, !carry else { return nil }
            magnitude = sum
        }
        if negative {
            guard magnitude <= UInt64(Int.max) + 1 else { return nil }
            return Int(truncatingIfNeeded: 0 &- magnitude)
        }
        guard magnitude <= UInt64(Int.max) else { return nil }
        return Int(magnitude)
    }

    /// `[+-]? (D+ (. D*)? | . D+) ([eE] [+-]? D+)?`, at most 64 characters
    /// (strtod's work grows with digits): a form every strtod reads whole and
    /// alike. No hexadecimal, no infinity or NaN, no white space.
    static func real(_ text: ArraySlice<UInt8>) -> Double? {
        guard text.count <= 64 else { return nil }
        var index = text.startIndex
        func digits() -> Int {
            let start = index
            while index < text.endIndex, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(text[index]) { index += 1 }
            return index - start
        }
        func take(_ byte: UInt8) -> Bool {
            guard index < text.endIndex, text[index] == byte else { return false }
            index += 1
            return true
        }
        _ = take(UInt8(ascii: "-")) || take(UInt8(ascii: "+"))
        var mantissa = digits()
        if take(UInt8(ascii: ".")) { mantissa += digits() }
        guard mantissa > 0 else { return nil }
        if take(UInt8(ascii: "e")) || take(UInt8(ascii: "E")) {
            _ = take(UInt8(ascii: "-")) || take(UInt8(ascii: "+"))
            guard digits() > 0 else { return nil }
        }
        guard index == text.endIndex else { return nil }
        return Double(String(decoding: text, as: UTF8.self))
    }

    /// `-?YYYY-MM-DDThh:mm:ssZ`, the only form Apple's reader takes (the year of 1 to 9 digits).
    static func isDate(_ text: ArraySlice<UInt8>) -> Bool {
        var rest = text
        if rest.first == UInt8(ascii: "-") { rest.removeFirst() }
        let year = rest.prefix { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }.count
        guard (1...9).contains(year) else { return false }
        rest.removeFirst(year)
        let pattern = Array("-dd-ddTdd:dd:ddZ".utf8)
        guard rest.count == pattern.count else { return false }
        return zip(rest, pattern).allSatisfy { byte, expected in
            expected == UInt8(ascii: "d") ? (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) : byte == expected
        }
    }

    static func isBase64(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "+"), UInt8(ascii: "/"), UInt8(ascii: "="):
            true
        default: false
        }
    }

    // MARK: Markup

    private struct Tag {
        let name: String
        let empty: Bool
        let offset: Int

        /// The name for messages: only name characters, but of any length.
        var shown: String { PropertyListReader.printable(name, limit: 40) }
    }

    /// `<name>` or `<name/>`, with white space before the end; `<plist>` may
    /// have `version="1.0"`. No other attribute: Apple's reader ends a tag at
    /// the first `>`, even one inside a quoted value.
    private mutating func startTag() throws(PolicyError) -> Tag {
        let offset = at
        at += 1  // "<"
        let name = nameHere()
        guard !name.isEmpty else { throw fail(at: offset, "'<' is not followed by an element name") }
        func shown() -> String { PropertyListReader.printable(name, limit: 40) }
        if skipSpace(), name == "plist", looking(at: "version") {
            at += 7
            guard pseudoAttribute() == "1.0" else { throw fail(at: offset, "<plist> should have version=\"1.0\" or no attribute") }
            skipSpace()
        }
        guard at < bytes.count else { throw fail(at: offset, "<\(shown()) is not closed with '>'") }
        let empty = looking(at: "/>")
        if empty || bytes[at] == UInt8(ascii: ">") {
            at += empty ? 2 : 1
            // Apple's reader refuses a start tag that ends the file (a bare <dict/>, say).
            guard at < bytes.count else { throw fail(at: offset, "the file ends right after <\(shown())>; end it with </plist>") }
            return Tag(name: name, empty: empty, offset: offset)
        }
        throw fail(at: offset, "<\(shown())> has attributes or stray characters; a property list element has none "
            + "(only <plist version=\"1.0\">): remove them")
    }

    /// `= "value"` (or single quotes, white space around '='): the value, if it
    /// holds only characters of XML version and encoding names.
    private mutating func pseudoAttribute() -> String? {
        skipSpace()
        guard at < bytes.count, bytes[at] == UInt8(ascii: "=") else { return nil }
        at += 1
        skipSpace()
        guard at < bytes.count, bytes[at] == UInt8(ascii: "\"") || bytes[at] == UInt8(ascii: "'") else { return nil }
        let quote = bytes[at]
        at += 1
        let start = at
        while at < bytes.count, bytes[at] != quote {
            switch bytes[at] {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."):
                at += 1
            default:
                return nil
            }
        }
        guard at < bytes.count else { return nil }
        at += 1
        return String(decoding: bytes[start..<(at - 1)], as: UTF8.self)
    }

    /// `<?xml version="1.0" encoding="UTF-8" standalone="yes"?>`, the last two optional.
    /// Apple's tools on macOS read the file in the encoding named here; this
    /// reader takes UTF-8 only, so any other name is refused.
    private mutating func xmlDeclaration() throws(PolicyError) {
        let start = at
        func malformed() -> PolicyError {
            fail(at: start, "the XML declaration is malformed; write \(Self.declaration)")
        }
        at += 5  // "<?xml"
        guard skipSpace(), looking(at: "version") else { throw malformed() }
        at += 7
        guard pseudoAttribute() == "1.0" else { throw malformed() }
        var spaced = skipSpace()
        if spaced, looking(at: "encoding") {
            at += 8
            guard let encoding = pseudoAttribute() else { throw malformed() }
            guard encoding.lowercased() == "utf-8" else {
                throw fail(at: start, "the XML declaration names encoding '\(PropertyListReader.printable(encoding))'; "
                    + "Apple's tools would read the bytes in it, this reader only as UTF-8: save the file as UTF-8 and write \(Self.declaration)")
            }
            spaced = skipSpace()
        }
        if spaced, looking(at: "standalone") {
            at += 10
            guard let value = pseudoAttribute(), value == "yes" || value == "no" else { throw malformed() }
            skipSpace()
        }
        guard looking(at: "?>") else { throw malformed() }
        at += 2
    }

    /// Apple's plist DOCTYPE, and nothing else: Apple's reader ends a DOCTYPE at
    /// its first `>`, an XML parser after its quoted literals and `[...]`.
    private mutating func doctype() throws(PolicyError) {
        let start = at
        func refused() -> PolicyError {
            fail(at: start, "only Apple's plist DOCTYPE is allowed, \(Self.appleDoctype), or none: another name or "
                + "identifier, declarations in [...] or a '>' in a literal are read differently by Apple's tools and XML parsers")
        }
        at += 9  // "<!DOCTYPE"
        guard skipSpace(), looking(at: "plist") else { throw refused() }
        at += 5
        guard skipSpace(), looking(at: "PUBLIC") else { throw refused() }
        at += 6
        guard skipSpace(), let publicID = literal(), Self.publicIDs.contains(publicID) else { throw refused() }
        guard skipSpace(), let systemID = literal(), systemID == Self.systemID else { throw refused() }
        skipSpace()
        guard at < bytes.count, bytes[at] == UInt8(ascii: ">") else { throw refused() }
        at += 1
    }

    /// A literal in double or single quotes, at most 100 bytes.
    private mutating func literal() -> String? {
        guard at < bytes.count, bytes[at] == UInt8(ascii: "\"") || bytes[at] == UInt8(ascii: "'") else { return nil }
        let quote = bytes[at]
        let start = at + 1
        var end = start
        while end < bytes.count, end - start <= 100, bytes[end] != quote { end += 1 }
        guard end < bytes.count, bytes[end] == quote else { return nil }
        at = end + 1
        return String(decoding: bytes[start..<end], as: UTF8.self)
    }

    private mutating func endTag(_ name: String) throws(PolicyError) {
        let offset = at
        guard looking(at: "</") else { throw fail("expected </\(name)>") }
        at += 2
        let found = nameHere()
        skipSpace()
        guard found == name, at < bytes.count, bytes[at] == UInt8(ascii: ">") else {
            throw fail(at: offset, "expected </\(name)>, found </\(PropertyListReader.printable(found, limit: 20))")
        }
        at += 1
    }

    /// An XML name (ASCII letters, digits, `-_.:`), possibly empty.
    private mutating func nameHere() -> String {
        let start = at
        while at < bytes.count {
            switch bytes[at] {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"),
                UInt8(ascii: "."), UInt8(ascii: ":"):
                at += 1
            default:
                return String(decoding: bytes[start..<at], as: UTF8.self)
            }
        }
        return String(decoding: bytes[start..<at], as: UTF8.self)
    }

    /// The text of a `<string>` or `<key>` up to `</name>`: character data,
    /// CDATA sections and references. Apple's reader refuses a comment or
    /// processing instruction here, and reads text starting with `$null` as
    /// no value at all: both are refused.
    private mutating func text(of name: String) throws(PolicyError) -> String {
        let open = at
        if looking(at: "$null") {
            throw fail("<\(name)> text starting with '$null' is read as no value by Apple's decoder; "
                + "write the '$' as &#36; if you mean it")
        }
        var result: [UInt8] = []
        var run = at
        while true {
            guard at < bytes.count else { throw fail(at: open, "<\(name)> is not closed") }
            switch bytes[at] {
            case UInt8(ascii: "<"):
                result += bytes[run..<at]
                if looking(at: "</") {
                    try endTag(name)
                    return String(decoding: result, as: UTF8.self)
                } else if looking(at: "<![CDATA[") {
                    let start = at + 9
                    at = try skip(past: "]]>", from: start, what: "CDATA section")
                    result += bytes[start..<(at - 3)]
                } else if looking(at: "<!--") || looking(at: "<?") {
                    throw fail("a comment or processing instruction inside <\(name)>, which Apple's reader refuses; move it outside")
                } else {
                    throw fail("an element inside <\(name)>; it holds only text")
                }
                run = at
            case UInt8(ascii: "&"):
                result += bytes[run..<at]
                try reference(into: &result)
                run = at
            default:
                at += 1
            }
        }
    }

    /// The characters of an `<integer>`, `<real>`, `<date>` or `<data>` up to
    /// `</name>`, taken as they are (Apple's reader expands nothing there).
    private mutating func plainText(of name: String) throws(PolicyError) -> ArraySlice<UInt8> {
        let open = at
        while at < bytes.count, bytes[at] != UInt8(ascii: "<") {
            guard bytes[at] != UInt8(ascii: "&") else {
                throw fail("a reference (&...;) inside <\(name)>, which Apple's reader takes literally; write the value plainly")
            }
            at += 1
        }
        guard at < bytes.count else { throw fail(at: open, "<\(name)> is not closed") }
        let text = bytes[open..<at]
        try endTag(name)
        return text
    }

    /// `&amp;`, `&lt;`, `&gt;`, `&quot;`, `&apos;`, `&#123;` or `&#x7B;` (at
    /// most 8 digits, as Apple's reader takes).
    private mutating func reference(into result: inout [UInt8]) throws(PolicyError) {
        let start = at
        var end = at + 1
        while end < bytes.count, end - start < 40, bytes[end] != UInt8(ascii: ";") { end += 1 }
        guard end < bytes.count, bytes[end] == UInt8(ascii: ";") else {
            throw fail("'&' that does not start a reference; write it as &amp;")
        }
        let name = bytes[(start + 1)..<end]
        func spelled() -> String { PropertyListReader.printable(String(decoding: name, as: UTF8.self)) }
        at = end + 1
        if name.elementsEqual("amp".utf8) {
            result.append(UInt8(ascii: "&"))
        } else if name.elementsEqual("lt".utf8) {
            result.append(UInt8(ascii: "<"))
        } else if name.elementsEqual("gt".utf8) {
            result.append(UInt8(ascii: ">"))
        } else if name.elementsEqual("quot".utf8) {
            result.append(UInt8(ascii: "\""))
        } else if name.elementsEqual("apos".utf8) {
            result.append(UInt8(ascii: "'"))
        } else {
            var digits = name.dropFirst()
            var radix: UInt64 = 10
            if digits.first == UInt8(ascii: "x") {
                radix = 16
                digits = digits.dropFirst()
            }
            guard name.first == UInt8(ascii: "#"), !digits.isEmpty,
                digits.allSatisfy({ TextInput.digit($0).map { $0 < radix } ?? false })
            else {
                throw fail(at: start, "unknown reference '&\(spelled());'; only &amp; &lt; &gt; &quot; &apos; and &#NUMBER; are understood")
            }
            guard digits.count <= 8 else {
                throw fail(at: start, "&\(spelled()); has more than 8 digits, which Apple's reader refuses; drop the leading zeros")
            }
            var value: UInt64 = 0
            for byte in digits { value = value * radix + TextInput.digit(byte)! }
            guard value != 0, value <= 0x10FFFF, let scalar = Unicode.Scalar(UInt32(value)) else {
                throw fail(at: start, "&\(spelled()); is not a character allowed in a policy")
            }
            UTF8.encode(scalar) { result.append($0) }
        }
    }

    /// White space and comments. A comment may not hold `--` (XML's rule,
    /// which also makes `<!-->` and `<!--->` unclosed, as they are to Apple's
    /// reader). A processing instruction is refused: Apple's reader finds its
    /// end from different places before and inside the root element.
    private mutating func skipMisc() throws(PolicyError) {
        while true {
            skipSpace()
            if looking(at: "<!--") {
                let open = at
                at += 4
                while true {
                    guard at + 1 < bytes.count else { throw fail(at: open, "comment is not closed with '-->'") }
                    if bytes[at] == UInt8(ascii: "-"), bytes[at + 1] == UInt8(ascii: "-") {
                        guard at + 2 < bytes.count, bytes[at + 2] == UInt8(ascii: ">") else {
                            throw fail("'--' inside a comment; XML allows it only in the closing '-->'")
                        }
                        at += 3
                        break
                    }
                    at += 1
                }
            } else if looking(at: "<?") {
                throw fail(looking(at: "<?xml") && !looking(at: "<?xml-")
                    ? "the XML declaration must come first in the file, before any space or comment"
                    : "a processing instruction (<?...?>), which a policy may not hold; remove it")
            } else {
                return
            }
        }
    }

    /// The offset just past the next `terminator` at or after `from`.
    private func skip(past terminator: StaticString, from: Int, what: String) throws(PolicyError) -> Int {
        var index = from
        while index < bytes.count {
            if looking(at: terminator, from: index) { return index + terminator.utf8CodeUnitCount }
            index += 1
        }
        throw fail("\(what) is not closed with '\(terminator)'")
    }

    /// Skips white space; true if there was some.
    @discardableResult
    private mutating func skipSpace() -> Bool {
        let start = at
        while at < bytes.count, TextInput.isSpace(bytes[at]) { at += 1 }
        return at > start
    }

    private func looking(at text: StaticString, from index: Int? = nil) -> Bool {
        let start = index ?? at
        let count = text.utf8CodeUnitCount
        guard count <= bytes.count - start else { return false }
        let pointer = text.utf8Start
        for offset in 0..<count where bytes[start + offset] != pointer[offset] { return false }
        return true
    }

    private func fail(at offset: Int? = nil, _ problem: String) -> PolicyError {
        PolicyError(
            file: source, key: nil,
            problem: "XML line \(TextInput.line(of: offset ?? at, in: bytes)): \(problem). "
                + PropertyListReader.fix)
    }
}
