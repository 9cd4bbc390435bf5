import Foundation
import Testing
@testable import Sandbox

/// The seccomp filters of the shipped option sets are assembled into Swift
/// (`CompiledFilters.swift`), so a launch does not name some 350 syscalls
/// through libseccomp and assemble the program (about 0.2 ms of every
/// `run`). `SyscallFilter.rules()` stays the one source: this suite requires
/// every compiled program to be exactly what `assemble()` gives now, and the
/// file's text to be what the generator writes. The filter tests run on
/// `compile()`, so they check the shipped programs themselves.
///
/// After changing the filter, regenerate the file with
/// `REGENERATE_COMPILED_FILTERS=1 swift test --filter CompiledFiltersTests`.
@Suite struct CompiledFiltersTests {
    static let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../Sources/Sandbox/Kernel/Generated/CompiledFilters.swift").standardized

    /// Every option set a launch can ask for without --explain or a
    /// policy's extra syscalls; those are assembled at launch. AF_UNIX
    /// sockets come only with the supervisor, and with a network entitlement
    /// only in the sandbox's own network (an allowed-hosts list, which
    /// brings the client's).
    static var shipped: [SyscallFilter.Options] {
        var all: [SyscallFilter.Options] = []
        for client in [false, true] {
            for server in [false, true] {
                for supervise in [false, true] {
                    for readOnly in [false, true] {
                        for native in [false, true] {
                            for unix in [false, true] where !unix || (supervise && (client || !server)) {
                                // Watches supervised apart from attribute reads only matters where those are native.
                                for watches in [false, true] where !watches || (native && supervise) {
                                    all.append(.init(
                                        networkClient: client, networkServer: server, superviseMetadata: supervise, readOnlyMounts: readOnly,
                                        nativeAttributeReads: native, superviseWatches: watches, unixSockets: unix))
                                }
                            }
                        }
                    }
                }
            }
        }
        return all
    }

    @Test func eachCompiledFilterIsWhatTheAssemblerBuildsNow() throws {
        #if arch(x86_64)
        for options in Self.shipped {
            let filter = SyscallFilter(options: options)
            let compiled = try #require(SyscallFilter.compiled(options), "\(options): regenerate CompiledFilters.swift (see this suite's comment)")
            #expect(compiled.withUnsafeBytes { Array($0) } == (try filter.assemble()), "\(options): regenerate CompiledFilters.swift")
            #expect(try filter.compile() == filter.assemble())
            let guardProgram = try #require(SyscallFilter.compiledGuard(options))
            #expect(guardProgram.withUnsafeBytes { Array($0) } == (try filter.assembleArgumentGuard()), "\(options): regenerate CompiledFilters.swift")
            #expect(try filter.argumentGuard() == filter.assembleArgumentGuard())
        }
        #endif
    }

    /// What is not shipped is assembled at launch, never taken from a
    /// neighbouring option set.
    @Test func otherOptionsAreAssembledAtLaunch() throws {
        var observed = SyscallFilter.Options()
        observed.observeDenials = true
        var extra = SyscallFilter.Options()
        extra.extraSyscalls = ["reboot"]
        for options in [observed, extra] {
            #expect(SyscallFilter.compiled(options) == nil)
            #expect(SyscallFilter.compiledGuard(options) == nil)
            #expect(try SyscallFilter(options: options).compile() == SyscallFilter(options: options).assemble())
        }
    }

    @Test func theCompiledFileIsTheGeneratorsOutput() throws {
        #if arch(x86_64)
        let expected = try Self.source()
        if ProcessInfo.processInfo.environment["REGENERATE_COMPILED_FILTERS"] == "1" {
            try expected.write(to: Self.file, atomically: true, encoding: .utf8)
        }
        let committed = try String(contentsOf: Self.file, encoding: .utf8)
        #expect(committed == expected, "CompiledFilters.swift is stale: regenerate it (see this suite's comment)")
        #endif
    }

    /// `struct sock_filter` is 8 bytes: each instruction as one UInt64, in
    /// the machine's own byte order (x86-64 only: the numbers are its own).
    static func source() throws -> String {
        func words(_ bytes: [UInt8]) -> [String] {
            stride(from: 0, to: bytes.count, by: 8).map { start in
                let word = bytes[start..<start + 8].withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
                let hex = String(word, radix: 16)
                return "0x" + String(repeating: "0", count: 16 - hex.count) + hex
            }
        }
        func array(_ name: String, _ bytes: [UInt8]) -> String {
            let all = words(bytes)
            let lines = stride(from: 0, to: all.count, by: 4).map { start in
                "        " + all[start..<min(start + 4, all.count)].joined(separator: ", ") + ","
            }
            return "    private static let \(name): [UInt64] = [\n" + lines.joined(separator: "\n") + "\n    ]\n"
        }
        var cases = ""
        var arrays = ""
        for (index, options) in shipped.enumerated() {
            cases += "        case (\(options.networkClient), \(options.networkServer), \(options.superviseMetadata), \(options.readOnlyMounts), "
                + "\(options.nativeAttributeReads), \(options.superviseWatches), \(options.unixSockets)): filter\(index)\n"
            arrays += array("filter\(index)", try SyscallFilter(options: options).assemble())
        }
        let plain = try SyscallFilter(options: .init()).assembleArgumentGuard()
        let networked = try SyscallFilter(options: .init(networkClient: true)).assembleArgumentGuard()
        arrays += array("guardPlain", plain) + array("guardNetworked", networked)
        return """
            // Generated by Tests/SandboxTests/CompiledFiltersTests.swift:
            // REGENERATE_COMPILED_FILTERS=1 swift test --filter CompiledFiltersTests
            // Do not edit; the tests require each program to equal what
            // SyscallFilter.assemble() and assembleArgumentGuard() build.

            extension SyscallFilter {
            #if arch(x86_64)
                /// The main filter for `options`, as `assemble()` builds it, for
                /// the shipped option sets (no --explain, no extra syscalls).
                static func compiled(_ options: Options) -> [UInt64]? {
                    guard options.extraSyscalls.isEmpty, !options.observeDenials else { return nil }
                    return switch (options.networkClient, options.networkServer, options.superviseMetadata, options.readOnlyMounts,
                                   options.nativeAttributeReads, options.superviseWatches, options.unixSockets) {

            """ + cases.split(separator: "\n").map { "        " + $0.dropFirst(4) }.joined(separator: "\n") + "\n" + """
                    default: nil
                    }
                }

                /// The argument guard for `options`, as `assembleArgumentGuard()` builds it.
                static func compiledGuard(_ options: Options) -> [UInt64]? {
                    guard options.extraSyscalls.isEmpty, !options.observeDenials else { return nil }
                    return options.networkClient || options.networkServer ? guardNetworked : guardPlain
                }


            """ + arrays + """
            #else
                static func compiled(_ options: Options) -> [UInt64]? { nil }
                static func compiledGuard(_ options: Options) -> [UInt64]? { nil }
            #endif
            }

            """
    }
}
