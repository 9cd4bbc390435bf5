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
