import Foundation
import Testing
import CSyscalls
import SystemKit
import SystemPackage

/// Descriptors in the tests' shared process: every test of every target runs
/// in one process, in parallel, so a descriptor closed twice, or inherited
/// by a program another test spawns, is someone else's bug report.
@Suite struct DescriptorTests {
    static func isOpen(_ fd: CInt) -> Bool { fcntl(fd, F_GETFD) >= 0 }

    /// A failed open's -1 given to the owner is a programming error, caught
    /// where it happens: owned, it would be "closed" later, and a number
    /// stored over it closed twice.
    @Test func aNegativeNumberIsRefused() async {
        await #expect(processExitsWith: .failure) { _ = OwnedDescriptor(taking: -1) }
        await #expect(processExitsWith: .failure) { _ = OwnedDescriptor(taking: -9) }
    }

    @Test func aDuplicateIsTheSameFileUnderAnotherNumberAndCloseOnExec() throws {
        let original = OwnedDescriptor(taking: open("/dev/null", O_RDONLY | O_CLOEXEC))
        let copy = try original.duplicate()
        #expect(copy.rawValue != original.rawValue)
        #expect(copy.rawValue >= 3, "a copy must never become someone's stdin, stdout or stderr")
        #expect(fcntl(copy.rawValue, F_GETFD) & FD_CLOEXEC != 0, "a program spawned meanwhile would inherit it")
        #expect(try copy.status().inodeIdentity == original.status().inodeIdentity)
    }

    @Test func aDuplicateOutlivesTheOriginal() throws {
        var original: OwnedDescriptor? = OwnedDescriptor(taking: open("/dev/null", O_RDONLY | O_CLOEXEC))
        let copy = try original!.duplicate()
        original = nil
        #expect(try copy.status().isRegularFile == false)
        #expect(Self.isOpen(copy.rawValue))
    }

    @Test func duplicatingAClosedNumberIsAnErrno() {
        let fd = open("/dev/null", O_RDONLY | O_CLOEXEC)
        let owner = OwnedDescriptor(taking: fd)
        // A number nothing in this process holds: the highest allowed.
        var limit = rlimit()
        getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        let unused = OwnedDescriptor(taking: CInt(clamping: limit.rlim_cur - 1))
        #expect(throws: Errno.badFileDescriptor) { try unused.duplicate() }
        _ = unused.release()  // never ours: not closed
        withExtendedLifetime(owner) {}
    }

    /// After `release()` the owner closes nothing: the number is the caller's.
    @Test func releasedDescriptorsAreNotClosed() {
        var owner: OwnedDescriptor? = OwnedDescriptor(taking: open("/dev/null", O_RDONLY | O_CLOEXEC))
        let fd = owner!.release()
        owner = nil
        #expect(Self.isOpen(fd))
        #expect(close(fd) == 0)
    }

    @Test func releasingTwiceOrUsingAfterReleaseIsAProgrammingError() async {
        await #expect(processExitsWith: .failure) {
            let owner = OwnedDescriptor(taking: open("/dev/null", O_RDONLY | O_CLOEXEC))
            _ = owner.release()
            _ = owner.release()
        }
        await #expect(processExitsWith: .failure) {
            let owner = OwnedDescriptor(taking: open("/dev/null", O_RDONLY | O_CLOEXEC))
            _ = owner.release()
            _ = owner.rawValue
        }
    }

    /// `directoryStream(taking:)` gives the descriptor to the stream only
    /// when the stream exists: on failure the owner still closes it.
    @Test func aDirectoryStreamTakesItsDescriptorOnlyOnSuccess() throws {
        let folder = OwnedDescriptor(taking: open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC))
        let stream = try directoryStream(taking: folder.duplicate())
        #expect(readdir(stream) != nil)
        #expect(closedir(stream) == 0)
        #expect(Self.isOpen(folder.rawValue))
        let file = OwnedDescriptor(taking: open("/dev/null", O_RDONLY | O_CLOEXEC))
        #expect(throws: Errno.notDirectory) { _ = try directoryStream(taking: file) }
        #expect(Self.isOpen(file.rawValue), "released although fdopendir failed")
    }
}

/// The class of bug stays fixed: no Swift file of the package makes a
/// descriptor that is not close-on-exec from its first instant (a program
/// another test or thread spawns in between inherits it: a pipe's write end
/// that keeps a reader waiting, an OFD lock, the seccomp listener).
/// `dup`, `dup2` and `pipe` are refused; `OwnedDescriptor.duplicate()`,
/// `csb_pipe_cloexec` and C code after fork (Sources/CLaunch) are the ways.
@Suite struct DescriptorHygieneTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Calls of dup, dup2, dup3 or pipe, bare or through Glibc (not Python's
    /// `os.pipe()` in a test's script, nor a method such as `.duplicate(`).
    static var call: Regex<Substring> { #/(?:^|[^\w.]|Glibc\.)(?:dup[23]?|pipe)\s*\(/# }

    /// Every Swift file under `folders`, and the lines of them that call one.
    static func scan(_ folders: [String], for offends: (Substring) -> Bool = { $0.contains(call) }) throws -> (files: Int, offenders: [String]) {
        var files = 0
        var found: [String] = []
        for folder in folders {
            let base = root.appendingPathComponent(folder)
            guard let walker = FileManager.default.enumerator(at: base, includingPropertiesForKeys: nil) else { continue }
            for case let url as URL in walker where url.pathExtension == "swift" {
                files += 1
                let text = try String(contentsOf: url, encoding: .utf8)
                for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                    guard line.contains("dup") || line.contains("pipe") || line.contains("read") else { continue }  // Regex is slow in debug builds
                    let code = line.split(separator: "//", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
                    if offends(code) {
                        found.append("\(url.path.dropFirst(root.path.count + 1)):\(number + 1): \(line.trimmingCharacters(in: .whitespaces))")
                    }
                }
            }
        }
        return (files, found)
    }

    @Test func theCheckFindsWhatItLooksFor() {
        // "(" joined on, so that this file passes its own check.
        for line in ["let fd = dup", "dup2", "#expect(Glibc.pipe", "x = pipe "].map({ $0 + "(x)" }) { #expect(line.contains(Self.call), "\(line)") }
        for line in ["r, w = os.pipe()", "try folder.duplicate()", "csb_pipe_cloexec(&p)", "let dupe(x)", "pipeline(x)"] { #expect(!line.contains(Self.call), "\(line)") }
    }

    @Test func noSwiftCodeDuplicatesOrMakesPipesWithoutCloseOnExec() throws {
        let (files, offenders) = try Self.scan(["Sources", "Tests", "Fuzz", "Examples", "Benchmarks"])
        #expect(files > 100, "the package's sources were not found at \(Self.root.path)")
        #expect(offenders.isEmpty, "use OwnedDescriptor.duplicate() or csb_pipe_cloexec:\n\(offenders.joined(separator: "\n"))")
    }

    /// Foundation's `readDataToEndOfFile()` traps on a read error (EBADF
    /// when another test closed the number twice): the whole run ends. The
    /// tests' harnesses use `readToEnd()` (`readAll()`), which throws.
    @Test func noTestReadsWithTheTrappingReadDataToEndOfFile() throws {
        let name = "readDataToEnd" + "OfFile("  // split: this file passes its own check
        let (files, offenders) = try Self.scan(["Tests", "Fuzz"]) { $0.contains(name) }
        #expect(files > 50)
        #expect(offenders.isEmpty, "use readAll() or readOutputs(_:_:):\n\(offenders.joined(separator: "\n"))")
    }
}
