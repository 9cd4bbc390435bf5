import Foundation
import Testing
@testable import Sandbox
import Policies

/// The shipped policies are compiled into Swift (`CompiledPolicies.swift`)
/// so a launch does not decode a property list (about 0.2 ms of every
/// `run`). The plists stay the one source: this suite decodes them with the
/// loader every `--policy FILE` goes through and requires the compiled
/// values, and the file's text, to be exactly what they give.
///
/// After editing a plist in Policies/, regenerate the file with
/// `REGENERATE_COMPILED_POLICIES=1 swift test --filter CompiledPoliciesTests`.
@Suite struct CompiledPoliciesTests {
    static let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../Sources/Sandbox/Policy/Generated/CompiledPolicies.swift").standardized

    @Test func eachCompiledPolicyIsWhatItsPlistDecodesTo() throws {
        for (name, plist) in BuiltinPolicies.all {
            let decoded = try Policy(data: plist, source: "builtin:\(name)")
            #expect(Policy.compiled(named: name) == decoded, "\(name): regenerate CompiledPolicies.swift (see this suite's comment)")
            #expect(Policy.builtin(named: name) == decoded)
        }
        #expect(Policy.compiled(named: "writer.plist") == nil)
        #expect(Policy.builtin(named: "nonesuch") == nil)
    }

    @Test func theCompiledFileIsTheGeneratorsOutput() throws {
        let expected = try Self.source()
        if ProcessInfo.processInfo.environment["REGENERATE_COMPILED_POLICIES"] == "1" {
            try expected.write(to: Self.file, atomically: true, encoding: .utf8)
        }
        let committed = try String(contentsOf: Self.file, encoding: .utf8)
        #expect(committed == expected, "CompiledPolicies.swift is stale: regenerate it (see this suite's comment)")
    }

    /// A plist that would compile to something the loader refuses never
    /// reaches the generator: it decodes the files with that loader.
    static func source() throws -> String {
        var text = """
            // Generated from Policies/*.plist by Tests/SandboxTests/CompiledPoliciesTests.swift:
            // REGENERATE_COMPILED_POLICIES=1 swift test --filter CompiledPoliciesTests
            // Do not edit; the tests require it to equal what the plists decode to.

            extension Policy {
                /// A shipped policy as code, nil for any other name.
                static func compiled(named name: String) -> Policy? {
                    var policy: Policy
                    switch name {

            """
        for (name, plist) in BuiltinPolicies.all {
            let policy = try Policy(data: plist, source: "builtin:\(name)")
            var lines = ["case \(literal(name)):", "    policy = Policy(source: \(literal(policy.source)))"]
            if policy.version != 1 { lines.append("    policy.version = \(policy.version)") }
            if let access = policy.userSelectedAccess { lines.append("    policy.userSelectedAccess = \(member(access))") }
            if policy.bookmarksAppScope { lines.append("    policy.bookmarksAppScope = true") }
            if policy.networkClient { lines.append("    policy.networkClient = true") }
            if policy.networkServer { lines.append("    policy.networkServer = true") }
            if policy.symbolicLinks { lines.append("    policy.symbolicLinks = true") }
            if policy.executeFiles { lines.append("    policy.executeFiles = true") }
            if policy.reviewChanges { lines.append("    policy.reviewChanges = true") }
            if let ports = policy.tcpConnectPorts { lines.append("    policy.tcpConnectPorts = \(ports)") }
            if let ports = policy.tcpBindPorts { lines.append("    policy.tcpBindPorts = \(ports)") }
            lines.append("    policy.systemPaths = [")
            for path in policy.systemPaths {
                lines.append("        SystemPath(path: \(literal(path.path)), access: \(member(path.access))),")
            }
            lines.append("    ]")
            if !policy.extraSyscalls.isEmpty {
                lines.append("    policy.extraSyscalls = [\(policy.extraSyscalls.map(literal).joined(separator: ", "))]")
            }
            if !policy.limits.isEmpty {
                let limits = policy.limits.sorted { $0.key < $1.key }.map { ".\($0.key.rawValue): \($0.value)" }
                lines.append("    policy.limits = [\(limits.joined(separator: ", "))]")
            }
            if !policy.warnings.isEmpty {
                lines.append("    policy.warnings = [\(policy.warnings.map(literal).joined(separator: ", "))]")
            }
            text += lines.map { "        " + $0 + "\n" }.joined()
        }
        text += """
                    default:
                        return nil
                    }
                    return policy
                }
            }

            """
        return text
    }

    static func member(_ access: Policy.PathAccess) -> String {
        switch access {
        case .readExecute: ".readExecute"
        case .readOnly: ".readOnly"
        case .readWrite: ".readWrite"
        }
    }

    /// A Swift string literal of `text`: printable ASCII as is, anything else escaped.
    static func literal(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case " "..."~": out.unicodeScalars.append(scalar)
            default: out += "\\u{\(String(scalar.value, radix: 16))}"
            }
        }
        return out + "\""
    }
}
