@preconcurrency import Glibc
import CLaunch
import Foundation
import SystemPackage
import Testing
@testable import Sandbox

/// The launcher and the grant helper stay in step: a reply that comes after
/// its request timed out is never taken for the next request's, and an
/// attach that timed out is taken away again by the helper.
@Suite struct LiveGrantHelperReplyTests {
    /// What a fake helper received: (operation, name) in order.
    final class Received: @unchecked Sendable {
        private let lock = NSLock()
        private var items: [(UInt32, String)] = []
        func add(_ operation: UInt32, _ name: String) { lock.withLock { items.append((operation, name)) } }
        var all: [(UInt32, String)] { lock.withLock { items } }
    }

    /// A helper that answers the first request (success) only after 400 ms
    /// and every later one at once with EACCES at the attach step.
    static func slowThenRefusing(_ fd: CInt, _ received: Received) {
        var first = true
        while true {
            var request = csb_grant_request()
            let got = withUnsafeMutableBytes(of: &request) { recv(fd, $0.baseAddress, $0.count, 0) }
            guard got == MemoryLayout<csb_grant_request>.size else { return }
            let name = withUnsafeBytes(of: request.name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            received.add(request.operation, name)
            var reply = csb_grant_reply()
            reply.sequence = request.sequence
            if first {
                usleep(400_000)
                first = false
            } else {
                reply.error = EACCES
                reply.step = Int32(CSB_GRANT_STEP_ATTACH.rawValue)
            }
            _ = withUnsafeBytes(of: &reply) { send(fd, $0.baseAddress, $0.count, CInt(MSG_NOSIGNAL)) }
        }
    }

    @Test func aLateReplyIsNotTakenForTheNextOne() throws {
        var pair: [CInt] = [-1, -1]
        try #require(socketpair(AF_UNIX, CInt(SOCK_SEQPACKET.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
        let helperEnd = pair[1]
        let received = Received()
        let thread = Thread { Self.slowThenRefusing(helperEnd, received) }
        thread.start()
        let area = LiveGrantArea(helper: OwnedDescriptor(taking: pair[0]), executeAllowed: false, timeout: 100)
        let folder = OwnedDescriptor(taking: open("/var/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC))
        #expect(throws: LiveGrantAreaError.helperGone(.timedOut)) { try area.attach(folder, writable: false) }
        usleep(600_000)  // the late reply (success) is waiting now
        // The helper refuses this one: the late success must not answer it.
        #expect(throws: LiveGrantAreaError.failed(step: LiveGrantArea.describe(step: Int32(CSB_GRANT_STEP_ATTACH.rawValue)), errno: .permissionDenied)) {
            try area.attach(folder, writable: false)
        }
        shutdown(helperEnd, CInt(SHUT_RDWR))
        // The attach that timed out was followed by a detach of its name.
        let operations = received.all
        #expect(operations.count == 3, "\(operations)")
        #expect(operations.map(\.0) == [CSB_GRANT_ATTACH.rawValue, CSB_GRANT_DETACH.rawValue, CSB_GRANT_ATTACH.rawValue], "\(operations)")
        #expect(operations.map(\.1) == ["1", "1", "2"], "\(operations)")
        withExtendedLifetime(area) {}
    }
}
