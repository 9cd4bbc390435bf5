/// Reads an XML property list: what Policies/*.plist and macOS `.entitlements`
/// files hold. Not a general XML parser: a prolog (`<?xml?>`, `<!DOCTYPE>`
/// without an internal subset, comments), then `<plist>` around one value.
/// Text may hold comments, CDATA sections, the five named entities and numeric
/// character references; nothing else is expanded, so no entity can grow.
/// The input has been checked to be UTF-8 without stray control characters.
struct XMLPropertyListReader {
    private let bytes: [UInt8]
    private let source: String
    private var at: Int
    private var objects = 0

    init(_ bytes: [UInt8], source: String, start: Int) {
        self.bytes = bytes
        self.source = source
        self.at = start
    }

    mutating func read() throws(PolicyError) -> PolicyValue {
        try skipMisc(prolog: true)
        guard at < bytes.count else { throw fail("no <plist> element") }
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
                let key = keyTag.empty ? "" : try text(of: "key")
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
        case "integer":
            let digits = tag.empty ? "" : try text(of: "integer")
            guard let number = Self.integer(digits) else {
                throw fail(at: tag.offset, "<integer>\(PropertyListReader.printable(digits))</integer> is not an integer: "
                    + "write digits only, from \(Int.min) to \(Int.max)")
            }
            return .integer(number)
        case "true", "false":
            if !tag.empty {
                try skipMisc()
                try endTag(tag.name)
            }
            return .bool(tag.name == "true")
        case "real":
            // An integral real reads as an integer, as Foundation's decoder did.
            // A long one is not parsed at all (strtod's work grows with digits).
            let text = tag.empty ? "" : try text(of: "real")
            return PropertyListReader.real(text.utf8.count <= 64 ? Double(text) : nil)
        case "date", "data":
            if !tag.empty { _ = try text(of: tag.name) }
            return .other(tag.name == "date" ? "a date" : "data")
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
    /// malformed or out of range.
    static func integer(_ text: String) -> Int? {
        var digits = Array(text.utf8)[...]
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

    // MARK: Markup

    private struct Tag {
        let name: String
        let empty: Bool
        let offset: Int

        /// The name for messages: only name characters, but of any length.
        var shown: String { PropertyListReader.printable(name, limit: 40) }
    }

    /// `<name attribute="value" ...>` or `<name .../>`; attributes are skipped.
    private mutating func startTag() throws(PolicyError) -> Tag {
        let offset = at
        at += 1  // "<"
        let name = nameHere()
        guard !name.isEmpty else { throw fail(at: offset, "'<' is not followed by an element name") }
        func shown() -> String { PropertyListReader.printable(name, limit: 40) }
        while true {
            skipSpace()
            guard at < bytes.count else { throw fail(at: offset, "<\(shown()) is not closed with '>'") }
            if bytes[at] == UInt8(ascii: ">") {
                at += 1
                return Tag(name: name, empty: false, offset: offset)
            }
            if looking(at: "/>") {
                at += 2
                return Tag(name: name, empty: true, offset: offset)
            }
            guard !nameHere().isEmpty else { throw fail("unexpected character in <\(shown())>") }
            skipSpace()
            guard at < bytes.count, bytes[at] == UInt8(ascii: "=") else { throw fail("an attribute of <\(shown())> has no '='") }
            at += 1
            skipSpace()
            guard at < bytes.count, bytes[at] == UInt8(ascii: "\"") || bytes[at] == UInt8(ascii: "'") else {
                throw fail("an attribute value of <\(shown())> is not quoted")
            }
            let quote = bytes[at]
            at += 1
            while at < bytes.count, bytes[at] != quote {
                guard bytes[at] != UInt8(ascii: "<") else { throw fail("'<' in an attribute value of <\(shown())>") }
                at += 1
            }
            guard at < bytes.count else { throw fail(at: offset, "an attribute value of <\(shown())> is not closed") }
            at += 1
        }
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

    /// The text up to `</name>`: character data, CDATA sections and
    /// references; comments and processing instructions are dropped.
    private mutating func text(of name: String) throws(PolicyError) -> String {
        let open = at
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
                    at = try skip(past: "]]>", what: "CDATA section")
                    result += bytes[start..<(at - 3)]
                } else if looking(at: "<!--") || looking(at: "<?") {
                    try skipMisc()
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

    /// `&amp;`, `&lt;`, `&gt;`, `&quot;`, `&apos;`, `&#123;` or `&#x7B;`.
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
            var value: UInt64 = 0
            for byte in digits where value <= 0x10FFFF {  // stops before it could overflow
                value = value * radix + TextInput.digit(byte)!
            }
            guard value != 0, value <= 0x10FFFF, let scalar = Unicode.Scalar(UInt32(value)) else {
                throw fail(at: start, "&\(spelled()); is not a character allowed in a policy")
            }
            UTF8.encode(scalar) { result.append($0) }
        }
    }

    /// White space, comments, processing instructions and, in the prolog, a
    /// `<!DOCTYPE>` without an internal subset.
    private mutating func skipMisc(prolog: Bool = false) throws(PolicyError) {
        while true {
            skipSpace()
            if looking(at: "<!--") {
                at = try skip(past: "-->", what: "comment")
            } else if looking(at: "<?") {
                at = try skip(past: "?>", what: "processing instruction")
            } else if prolog, looking(at: "<!DOCTYPE") {
                let start = at
                var quote: UInt8? = nil
                while true {
                    guard at < bytes.count else { throw fail(at: start, "<!DOCTYPE is not closed") }
                    let byte = bytes[at]
                    at += 1
                    if let open = quote {
                        if byte == open { quote = nil }
                    } else if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'") {
                        quote = byte
                    } else if byte == UInt8(ascii: "[") {
                        throw fail(at: start, "a DOCTYPE with its own declarations ([...]) is not supported; "
                            + "use the standard plist DOCTYPE line")
                    } else if byte == UInt8(ascii: ">") {
                        break
                    }
                }
            } else {
                return
            }
        }
    }

    /// The offset just past the next `terminator`.
    private func skip(past terminator: StaticString, what: String) throws(PolicyError) -> Int {
        var index = at
        while index < bytes.count {
            if looking(at: terminator, from: index) { return index + terminator.utf8CodeUnitCount }
            index += 1
        }
        throw fail("\(what) is not closed with '\(terminator)'")
    }

    private mutating func skipSpace() {
        while at < bytes.count, TextInput.isSpace(bytes[at]) { at += 1 }
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
