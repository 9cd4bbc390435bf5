// The oracle the policy reader is held to: what Foundation's decoders read
// from the same bytes. The fuzzer (Fuzz/PolicyFuzzer) and the agreement
// tests (Tests/SandboxTests/PolicyReaderAgreementTests) compare with it.
import FoundationEssentials
@_spi(Fuzzing) import PropertyLists

/// Foundation's reading of a value: the Decodable PolicyValue of before.
public enum FoundationValue: Decodable, Equatable, Sendable {
    case bool(Bool)
    case integer(Int)
    case string(String)
    case array([FoundationValue])
    case dictionary([String: FoundationValue])
    case other

    public init(from decoder: any Decoder) throws {
        if let single = try? decoder.singleValueContainer() {
            if let text = try? single.decode(String.self) {
                self = .string(text)
                return
            }
            if let flag = try? single.decode(Bool.self) {
                self = .bool(flag)
                return
            }
            if let number = try? single.decode(Int.self) {
                self = .integer(number)
                return
            }
        }
        if var list = try? decoder.unkeyedContainer() {
            var items: [FoundationValue] = []
            while !list.isAtEnd { items.append(try list.decode(FoundationValue.self)) }
            self = .array(items)
        } else if let dict = try? decoder.singleValueContainer().decode([String: FoundationValue].self) {
            self = .dictionary(dict)
        } else {
            self = .other
        }
    }

    /// Our reader's value, in the same terms.
    @_spi(Fuzzing) public init(_ value: PolicyValue) {
        switch value {
        case .bool(let flag): self = .bool(flag)
        case .integer(let number): self = .integer(number)
        case .string(let text): self = .string(text)
        case .array(let items): self = .array(items.map(FoundationValue.init))
        case .dictionary(let entries): self = .dictionary(entries.mapValues(FoundationValue.init))
        case .other: self = .other
        }
    }

    /// Same value, reading every `.other` kind as one.
    @_spi(Fuzzing) public func matches(_ ours: PolicyValue) -> Bool { self == FoundationValue(ours) }

    public var dictionaryValue: [String: FoundationValue]? {
        if case .dictionary(let entries) = self { entries } else { nil }
    }

    /// A property list's top dictionary as Foundation reads it, nil when it refuses.
    public static func readPropertyList(_ bytes: [UInt8]) -> [String: FoundationValue]? {
        try? PropertyListDecoder().decode([String: FoundationValue].self, from: Data(bytes))
    }

    /// A policy's bytes (JSON or a property list) as Foundation reads them.
    public static func decode(_ bytes: [UInt8]) -> FoundationValue? {
        let first = bytes.first { $0 != 0x20 && $0 != 0x0A && $0 != 0x0D && $0 != 0x09 }
        if first == UInt8(ascii: "{") {
            return try? .dictionary(JSONDecoder().decode([String: FoundationValue].self, from: Data(bytes)))
        }
        return readPropertyList(bytes).map { .dictionary($0) }
    }
}
